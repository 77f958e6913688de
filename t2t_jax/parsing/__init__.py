"""English constituency parsing as a sequence-to-sequence task (§6.3).

`trees` reads Penn-Treebank bracketed trees and cleans them; `linearize` turns a tree into
the model's target sequence and a decoded sequence back into a tree over the input words;
`treebank` prepares a treebank folder as a dataset of (sentence, linearized tree) pairs;
`grammar` generates a synthetic English treebank to run everything offline; `parse` turns
sentences into trees with a trained model and scores them with EVALB (`t2t_jax.parsing.evalb`);
`task` registers all this as the 'treebank' task (`t2t_jax.data.tasks`) on import.
"""

from t2t_jax.parsing import task  # noqa: F401  (registers the 'treebank' task)

"""`python -m t2t_jax.inference.bleu`: the command line of `t2t_jax.inference.bleu` (its `main`).

An entry of its own because `import t2t_jax` already imports t2t_jax.inference.bleu: run as
`python -m`, the module itself would be executed a second time as __main__, and runpy warns
about that (a RuntimeWarning) before every output.
"""

import sys

from t2t_jax.inference.bleu import main

sys.exit(main())

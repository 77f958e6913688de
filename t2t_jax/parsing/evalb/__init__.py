"""The EVALB bracket scorer (Sekine and Collins) in Python, scoring exactly as the C program.

`score` scores trees, `read` reads them, `params` holds COLLINS.prm and new.prm, `result` the
figures; this package re-exports the API (`evalb.score_lines`, `evalb.COLLINS`, ...).

`python -m t2t_jax.parsing.evalb --gold GOLD --test TEST` prints EVALB's summary.
"""

from t2t_jax.parsing.evalb.params import (COLLINS, NEW, EvalbError, EvalbParams,  # noqa: F401
                                          parse_params, read_params)
from t2t_jax.parsing.evalb.result import (ERROR, OK, SKIPPED, EvalbResult,  # noqa: F401
                                          SentenceScore, Totals)
from t2t_jax.parsing.evalb.score import main, score_files, score_lines, score_trees  # noqa: F401

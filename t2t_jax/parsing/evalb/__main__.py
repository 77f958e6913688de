"""`python -m t2t_jax.parsing.evalb`: EVALB's summary of --test trees against --gold trees."""

from t2t_jax.parsing.evalb.score import main

main()

"""Studies of what the model learns: Table 3 in miniature, the model variants, the embedded
default's sweep, source dependence, the second corpus, parsing, EVALB, same-machine A/B."""

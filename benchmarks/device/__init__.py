"""The device check: the prepared, time-boxed run for a lent GPU (check.py) and its stages
(numerics.py, train.py, e2e.py), with the wheels and the rehearsal that prepare it."""

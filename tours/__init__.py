"""The damage tours: main.py run as a hostile new user would (damaged files, read-only and full
targets, signals, concurrent runs), each try classified by what the user sees.

common.py holds what the tries share; the tries import it; the runner (files_tour.py) imports
the tries; variants_and_tools_tries.py is a runner of its own, over export_and_plan_tries.py and
library_calls_tries.py. Nothing here imports the other
benchmark folders, only benchmarks.shared (the harness)."""

"""The damage tours: main.py run as a hostile new user would (damaged files, read-only and full
targets, signals, concurrent runs), each try classified by what the user sees.

common.py holds what the tries share; the tries import it; the runner (damage_tour.py) imports
the tries; damage_fourth_tries.py is a runner of its own, over damage_fourth_tools.py and
damage_fourth_library.py. Nothing here imports the other
benchmark folders, only benchmarks.shared (the harness)."""

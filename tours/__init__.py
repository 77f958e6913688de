"""The damage tours: main.py run as a hostile new user would (damaged files, read-only and full
targets, signals, concurrent runs), each try classified by what the user sees.

common.py holds what the tries share; the tries import it; the runner (files_tour.py) imports
the tries; variants_and_tools_tries.py is a runner of its own, over export_and_plan_tries.py and
library_calls_tries.py. workdir_keys_streams_tries.py, a user's tour of main.py from outside,
is a runner too, over one module a surface (workdir_, keys_, streams_, files_surface_tries.py)
and their user_tour_fixtures.py and user_tour_kit.py; it imports neither common.py nor t2t_jax.
Nothing here imports the other benchmark folders, only benchmarks.shared (the harness)."""

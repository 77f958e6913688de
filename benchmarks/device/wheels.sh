#!/usr/bin/env bash
# Builds the folder of wheels that a lent GPU machine lacks, so that benchmarks/device/check.py
# (docs/performance.md, "On a lent GPU: the device check") runs there with no network.
#
#   bash benchmarks/device/wheels.sh            # -> .whl/ in the repo root (git-ignored)
#   bash benchmarks/device/wheels.sh /tmp/whl   # -> another folder
#   PYTHON=/work/venv/bin/python bash benchmarks/device/wheels.sh
#
# That machine's image (Python 3.12, x86-64, jax 0.11 for CUDA 13, flax, optax, orbax, numpy,
# protobuf, etils, absl-py, sentencepiece, sacrebleu, pyarrow, ...) lacks the input pipeline
# (grain, tensorflow-datasets, array_record), ml-collections, tensorboardX, ctranslate2,
# sacremoses and importlib_resources, and those packages' own dependencies listed in DEPS below.
# Each is fetched as a cp312 manylinux x86-64 wheel with --no-deps, one version of each:
# the top-level ones at the versions requirements.txt / requirements-serving.txt pin, the
# dependencies at the versions the tested Python 3.11 set resolves to. A package that ships only
# an sdist (promise) is built into a wheel here (`pip wheel --no-deps`; it is pure Python).
# What the image already has is NOT carried (two versions of one package stop the install, and
# a carried numpy or protobuf would shadow the image's, which jax there was built against).
#
# DEPS was found by reading each wheel's METADATA Requires-Dist (for Python 3.12 on Linux,
# extras included where a requirement names them, e.g. etils[epath]) and leaving out every
# name in the image's package list; the end of this script prints any Requires-Dist that the
# folder does not satisfy, which should be only packages the image has.
#
# The folder travels with the working tree, which may not exceed 64 MiB in all: the script
# prints the wheels' size and the tree's (tracked + untracked-not-ignored files) and fails if
# their sum is over that. Needs pip and network access here; the machine there needs neither:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DEST=${1:-.whl}
PYTHON=${PYTHON:-python3}
LIMIT_MIB=${LIMIT_MIB:-64}  # what may travel to the device machine (its README)

# Top-level packages: their pins are read from the requirements files, so they stay in step.
# ctranslate2 (42.8 MiB) is not carried: no stage of the check exports, and without it the
# folder and the tree are a sixth of the 64 MiB that may travel.
TOP=(grain tensorflow-datasets array_record ml-collections tensorboardX sacremoses
     importlib_resources)
# Their dependencies that the image lacks (versions as the tested 3.11 environment has them).
DEPS=(
  dm-tree==0.1.10                  # tensorflow-datasets
  immutabledict==4.3.1             # tensorflow-datasets
  promise==2.3                     # tensorflow-datasets (sdist only: built here)
  simple-parsing==0.1.9            # tensorflow-datasets
  docstring-parser==0.18.0         # simple-parsing
  tensorflow-metadata==1.21.0      # tensorflow-datasets
  googleapis-common-protos==1.76.0 # tensorflow-metadata
  termcolor==3.3.0                 # tensorflow-datasets
  toml==0.10.2                     # tensorflow-datasets
  portpicker==1.6.0                # grain
)
SDIST_ONLY=(promise)

pin() {  # pin NAME -> NAME==VERSION from requirements*.txt (names compared as PEP 503 does)
  local want line name
  want=$(echo "$1" | tr 'A-Z_.' 'a-z--')
  while read -r line; do
    line=${line%%#*}
    name=$(echo "${line%%==*}" | tr 'A-Z_.' 'a-z--' | tr -d ' ')
    if [[ "$line" == *==* && "$name" == "$want" ]]; then echo "$line" | tr -d ' '; return; fi
  done < <(cat requirements.txt requirements-serving.txt)
  echo "wheels.sh: no pin for $1 in requirements.txt / requirements-serving.txt" >&2
  return 1
}

SPECS=()
for p in "${TOP[@]}"; do SPECS+=("$(pin "$p")"); done
SPECS+=("${DEPS[@]}")

mkdir -p "$DEST"
PLATFORMS=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  PLATFORMS+=(--platform "${tag}_x86_64")
done
BINARY=() SOURCE=()
for s in "${SPECS[@]}"; do
  name=${s%%==*}
  if [[ " ${SDIST_ONLY[*]} " == *" $name "* ]]; then SOURCE+=("$s"); else BINARY+=("$s"); fi
done
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none "${PLATFORMS[@]}" \
    -d "$DEST" "${BINARY[@]}"
for s in "${SOURCE[@]}"; do
  # Pure-Python sdists become py3-none-any wheels, which install on any Python 3.
  "$PYTHON" -m pip wheel -q --no-deps --no-binary=:all: -w "$DEST" "$s"
done

# One version of each, nothing else in the folder: a stale wheel from an earlier pin would
# make the install on the device fail ("Double requirement given" / two dist-infos).
"$PYTHON" - "$DEST" "${SPECS[@]}" <<'EOF'
import email.parser, pathlib, re, sys, zipfile
dest, specs = pathlib.Path(sys.argv[1]), sys.argv[2:]
norm = lambda n: re.sub(r'[-_.]+', '-', n).lower()
want = {norm(s.split('==')[0]): s.split('==')[1] for s in specs}
have, requires = {}, {}
for whl in sorted(dest.glob('*.whl')):
  with zipfile.ZipFile(whl) as z:
    meta = next(n for n in z.namelist() if n.endswith('.dist-info/METADATA'))
    msg = email.parser.Parser().parsestr(z.read(meta).decode())
  name = norm(msg['Name'])
  if name not in want or msg['Version'] != want[name]:
    sys.exit(f'wheels.sh: {whl.name} is not asked for here: remove it')
  if name in have:
    sys.exit(f'wheels.sh: two wheels of {name} in {dest}')
  have[name] = whl.name
  for r in msg.get_all('Requires-Dist') or []:
    if 'extra ==' not in r and 'python_version < "3.' not in r:
      requires.setdefault(norm(re.split(r'[\s\[<>=!~;(]', r, 1)[0]), set()).add(name)
missing = sorted(set(want) - set(have))
if missing:
  sys.exit(f'wheels.sh: no wheel for {missing}')
print(f'{len(have)} wheels in {dest}:')
for n in sorted(have):
  print('  ' + have[n])
outside = {r: sorted(by) for r, by in sorted(requires.items()) if r not in have}
print('needed from the image (not carried): ' +
      ', '.join(f'{r} ({"/".join(by)})' for r, by in outside.items()))
EOF

# Sizes: the folder, and what else travels (tracked + untracked-not-ignored files; the wheels'
# folder is left out of the tree's count in case it is not ignored).
wheels_bytes=$(find "$DEST" -type f -name '*.whl' -printf '%s\n' | awk '{s+=$1} END {print s+0}')
dest_rel=$(realpath -m --relative-to="$ROOT" "$DEST")
tree_bytes=$(git ls-files -z --cached --others --exclude-standard \
  | { grep -zv "^${dest_rel}/" || true; } \
  | xargs -0 -r stat -c '%s' 2>/dev/null | awk '{s+=$1} END {print s+0}' || true)
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
total=$((wheels_bytes + tree_bytes))
echo "wheels: $(mib "$wheels_bytes") in $DEST; working tree: $(mib "$tree_bytes");" \
     "together $(mib "$total") of the ${LIMIT_MIB} MiB that may travel"
if (( total > LIMIT_MIB * 1048576 )); then
  echo "wheels.sh: over ${LIMIT_MIB} MiB: the device call would be refused" >&2
  exit 1
fi

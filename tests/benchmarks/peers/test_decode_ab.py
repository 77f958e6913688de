"""benchmarks/peers/decode_ab.py: the pieces that need no second commit (the A/B itself is run by
hand before a decoding change merges; docs/performance.md), and its arguments, each checked
before anything starts (no worktree, no jax)."""

import jax
import numpy as np
import pytest

from benchmarks.peers import decode_ab, decode_ab_side


def _shapes():
  return {'a': {'kernel': jax.ShapeDtypeStruct((2, 3), np.float32)},
          'b': jax.ShapeDtypeStruct((4,), np.float32)}


def test_filled_puts_each_flat_leaf_in_its_place():
  flat = {"['a']['kernel']": np.ones((2, 3), np.float32), "['b']": np.arange(4.0)}
  tree = decode_ab_side._filled(_shapes(), dict(flat))
  assert tree['a']['kernel'].shape == (2, 3)
  np.testing.assert_array_equal(tree['b'], np.arange(4.0))


def test_filled_refuses_other_trees():
  with pytest.raises(ValueError, match='vs'):
    decode_ab_side._filled(_shapes(), {"['a']['kernel']": np.ones((3, 2)), "['b']": np.ones(4)})
  with pytest.raises(ValueError, match='does not have'):
    decode_ab_side._filled(_shapes(), {"['a']['kernel']": np.ones((2, 3)), "['b']": np.ones(4),
                                  "['c']": np.ones(1)})
  with pytest.raises(KeyError):
    decode_ab_side._filled(_shapes(), {"['b']": np.ones(4)})


def test_worktree_side_is_this_checkout():
  with decode_ab._tree('WORKTREE', '/nonexistent') as (commit, path):
    assert path == decode_ab.ROOT
    assert commit.split('+')[0]


@pytest.mark.parametrize('argv, says', [
    (['--base', 'no-such-revision'], f'--base=no-such-revision: not a commit of {decode_ab.ROOT}'),
    (['--base', 'HEAD', '--head', 'nope'], f'--head=nope: not a commit of {decode_ab.ROOT}'),
    (['--base', 'HEAD', '--rows', '0', '--beam', '-1', '--rounds', '0'],
     "argument --rows: expected a whole number of at least 1, not '0'"),
    (['--base', 'HEAD', '--beam', '-1'], "argument --beam: expected a whole number of at least 1"),
    (['--base', 'HEAD', '--rounds', '0'], "argument --rounds: expected a whole number of at least"),
    (['--base', 'HEAD', '--step-repeats', '0'], 'argument --step-repeats: expected a whole'),
    (['--base', 'HEAD', '--sentences', '0'], 'argument --sentences: expected a whole number'),
    (['--base', 'HEAD', '--src-len', '0'], 'argument --src-len: expected a whole number'),
    (['--base', 'HEAD', '--lengths', '16'], "argument --lengths: expected two different whole "
     "numbers >= 1 such as 16,128, not '16'"),
    (['--base', 'HEAD', '--lengths', '16,16'], "argument --lengths: expected two different"),
    (['--base', 'HEAD', '--lengths', '0,16'], "argument --lengths: expected two different"),
    (['--base', 'HEAD', '--lengths', '16,x'], "argument --lengths: expected two different"),
    (['--base', 'HEAD', '--workdir', '{tmp}/absent'], '--workdir={tmp}/absent: no such folder'),
    (['--base', 'HEAD', '--workdir', '{tmp}/notes.txt'],
     "--workdir={tmp}/notes.txt: is a file; expected a trained run's folder"),
    (['--base', 'HEAD', '--workdir', '{tmp}', '--sentences', '1011'],
     '--sentences=1011: the test set has 1010'),
    (['--base', 'HEAD', '--ct2', '{tmp}'], '--ct2 needs --workdir (the run it was exported from)'),
    (['--base', 'HEAD', '--workdir', '{tmp}', '--ct2', '{tmp}'],
     '--ct2={tmp}: no CTranslate2 model.bin there'),
    (['--base', 'HEAD', '--ct2', '{tmp}', '--ct2-split', '2y1'],
     '--ct2-split=2y1: expected one IxJ, e.g. 2x1'),
    (['--base', 'HEAD', '--ct2', '{tmp}', '--ct2-split', '1x2,2x1'],
     '--ct2-split=1x2,2x1: expected one IxJ, e.g. 2x1'),
    (['--base', 'HEAD', '--out', '{tmp}/notes.txt/ab.jsonl'],
     'argument --out: {tmp}/notes.txt/ab.jsonl: {tmp}/notes.txt is a file, not a folder'),
])
def test_a_bad_argument_stops_it_in_one_line_before_anything_starts(tmp_path, capsys, argv,
                                                                    says):
  (tmp_path / 'notes.txt').write_text('x')
  with pytest.raises(SystemExit) as exit_:
    decode_ab._parse([a.format(tmp=tmp_path) for a in argv])
  err = capsys.readouterr().err
  assert exit_.value.code == 2 and 'Traceback' not in err
  assert f': error: {says.format(tmp=tmp_path)}' in err.strip().splitlines()[-1], err
  assert sorted(p.name for p in tmp_path.iterdir()) == ['notes.txt']


def test_lengths_beyond_the_models_positions_are_refused(capsys):
  parser, args = decode_ab._parse(['--base', 'HEAD', '--lengths', '128,16'])
  assert args.lengths == [16, 128] and args.rows == 4 and args.out is None
  decode_ab._check_size(parser, args, {'max_len': 256})
  for argv, says in ((['--lengths', '16,257'], '--lengths=257: longer than the model\'s 256'),
                     (['--src-len', '300'], '--src-len=300: longer than the model\'s 256')):
    parser, args = decode_ab._parse(['--base', 'HEAD', *argv])
    with pytest.raises(SystemExit):
      decode_ab._check_size(parser, args, {'max_len': 256})
    assert says in capsys.readouterr().err.strip().splitlines()[-1]

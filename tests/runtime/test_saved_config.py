"""A checkpoint's saved config read by a version of the code that lacks one of its keys: every
mode accepts it alike, with one warning naming the checkpoint and the key."""

import json
import logging
import os

import pytest

from t2t_jax import config as config_lib
from t2t_jax.inference import checkpoint_choice
from t2t_jax.runtime import checkpoint

from checkpoint_helpers import save, tiny_config, tree


def _with_obsolete_key(workdir):
  save(workdir, {1: tree(1.0)})
  item = os.path.join(workdir, 'checkpoints', '1', 'config', 'metadata')
  with open(item) as f:
    saved = json.load(f)
  with open(item, 'w') as f:
    json.dump(dict(saved, obsolete_key=3), f)
  return os.path.join(workdir, 'checkpoints', '1')


def _warnings(caplog):
  return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
          and 'obsolete_key' in r.getMessage()]


def test_resume_and_decode_agree_on_a_key_this_version_lacks(tmp_path, caplog):
  path = _with_obsolete_key(str(tmp_path))
  expected = [f"checkpoint {path}: its saved config has key 'obsolete_key', which this "
              'version does not define; ignored (a key the code no longer reads cannot change '
              'the model)']
  checkpointer = checkpoint.Checkpointer(str(tmp_path))
  checkpointer.check_compatible(tiny_config())  # resume: accepted, and said
  checkpointer.close()
  assert _warnings(caplog) == expected
  caplog.clear()
  # Decode, eval, export, attention: the config they read is the saved one without the key.
  inference = checkpoint_choice.load_inference_params(str(tmp_path))
  config = config_lib.from_json(inference.config_json,
                                checkpoint_choice.checkpoint_name(inference.path))
  assert 'obsolete_key' not in config and config.d_model == tiny_config().d_model
  assert _warnings(caplog) == expected


def test_a_saved_value_this_version_refuses_names_the_checkpoint():
  saved = checkpoint.config_to_json(tiny_config())
  saved['num_heads'] = 0
  with pytest.raises(config_lib.ConfigError, match=r"^checkpoint DIR: its saved config: config "
                     r"key 'num_heads': expected a value > 0, got 0$"):
    config_lib.from_json(saved, 'checkpoint DIR')

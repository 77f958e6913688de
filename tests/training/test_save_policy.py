"""The checkpoint save decision: step and time policies, decided once for all processes."""

import jax
import pytest

from t2t_jax.training import save_policy


class FakeClock:

  def __init__(self):
    self.now = 1000.0

  def __call__(self):
    return self.now


def test_step_policy_and_final_steps_save_without_any_clock():
  policy = save_policy.SavePolicy(every_steps=5, clock=FakeClock())
  assert [s for s in range(1, 21) if policy.should_save(s)] == [5, 10, 15, 20]
  assert policy.should_save(7, final=True)
  assert not save_policy.SavePolicy().should_save(10)  # both policies off


def test_time_policy_saves_at_the_first_decision_step_after_the_interval():
  clock = FakeClock()
  policy = save_policy.SavePolicy(every_minutes=1.0, check_every=10, clock=clock)
  decisions = []
  for step in range(1, 61):
    clock.now += 7.0  # 7 s a step: 60 s pass after step 9 (63 s), step 10 decides
    if policy.should_save(step):
      decisions.append(step)
      policy.saved()
  # After a save at 10 (t=70 s from the start), 60 s more are reached at step 19 -> 20 saves.
  assert decisions == [10, 20, 30, 40, 50, 60]


def test_time_policy_follows_process_0_on_every_process(monkeypatch):
  """A process whose clock says 'due' still follows process 0's broadcast answer."""
  clock = FakeClock()
  answers = []

  def broadcast(flag):  # process 0 said: not due
    answers.append(flag)
    return False

  monkeypatch.setattr(jax, 'process_count', lambda: 2)
  monkeypatch.setattr(jax, 'process_index', lambda: 1)
  policy = save_policy.SavePolicy(every_minutes=0.01, check_every=1, clock=clock,
                                  broadcast=broadcast)
  clock.now += 3600.0
  assert not policy.should_save(1)
  assert answers == [False]  # process 1 never offers its own clock's answer
  monkeypatch.setattr(jax, 'process_index', lambda: 0)
  policy = save_policy.SavePolicy(every_minutes=0.01, clock=clock, broadcast=lambda f: f)
  clock.now += 3600.0
  assert policy.should_save(1)


@pytest.mark.parametrize('step', [3, 4])
def test_time_policy_is_not_consulted_between_decision_steps(monkeypatch, step):
  calls = []
  monkeypatch.setattr(jax, 'process_count', lambda: 2)
  policy = save_policy.SavePolicy(every_minutes=1.0, check_every=5, clock=FakeClock(),
                                  broadcast=lambda f: calls.append(f) or f)
  assert not policy.should_save(step)
  assert calls == []  # no collective off the decision steps

"""huge_pages: the command re-executes itself once with glibc's huge-page tunable."""

import os
import subprocess
import sys

import pytest

from t2t_jax.runtime import huge_pages

LINUX = dict(platform='linux', libc='glibc 2.36', thp='madvise')


def test_the_tunable_is_wanted_once_on_linux_glibc_with_transparent_huge_pages():
  assert huge_pages.wanted({}, **LINUX)
  assert huge_pages.wanted({'GLIBC_TUNABLES': 'glibc.malloc.arena_max=2'}, **LINUX)
  assert huge_pages.wanted({}, **dict(LINUX, thp='always'))
  # Set already (the re-executed process, or the user's own choice, even 0): left alone.
  assert not huge_pages.wanted({'GLIBC_TUNABLES': huge_pages.TUNABLE}, **LINUX)
  assert not huge_pages.wanted({'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=0'}, **LINUX)
  assert not huge_pages.wanted({'T2T_HUGE_PAGES': '0'}, **LINUX)
  assert not huge_pages.wanted({}, **dict(LINUX, thp='never'))
  assert not huge_pages.wanted({}, **dict(LINUX, thp=None))
  assert not huge_pages.wanted({}, **dict(LINUX, platform='darwin'))
  assert not huge_pages.wanted({}, **dict(LINUX, libc=''))


def test_a_bad_switch_is_refused_naming_it():
  with pytest.raises(huge_pages.HugePagesError, match=r"T2T_HUGE_PAGES='yes': expected 1"):
    huge_pages.wanted({'T2T_HUGE_PAGES': 'yes'}, **LINUX)


def test_the_tunable_is_added_to_the_users_own():
  assert huge_pages.tunables({}) == 'glibc.malloc.hugetlb=1'
  assert huge_pages.tunables({'GLIBC_TUNABLES': 'glibc.malloc.arena_max=2'}) == (
      'glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1')


def test_the_kernel_mode_is_the_bracketed_one(tmp_path):
  path = tmp_path / 'enabled'
  path.write_text('always [madvise] never\n')
  assert huge_pages._thp_mode(str(path)) == 'madvise'
  assert huge_pages._thp_mode(str(tmp_path / 'missing')) is None


def _child(env):
  code = ('import os, sys; from t2t_jax.runtime import huge_pages; huge_pages.reexec(); '
          'print(os.environ.get("GLIBC_TUNABLES"), os.getpid(), sys.argv[1:])')
  out = subprocess.run([sys.executable, '-c', code, 'x', '--y=1'], env=env, check=True,
                       capture_output=True, text=True, timeout=60).stdout.split()
  return out


@pytest.mark.skipif(not huge_pages.wanted({k: v for k, v in os.environ.items()
                                           if k not in ('GLIBC_TUNABLES', 'T2T_HUGE_PAGES')}),
                    reason='no glibc with transparent huge pages here')
def test_the_process_runs_again_with_the_tunable_and_its_own_arguments():
  env = {k: v for k, v in os.environ.items() if k not in ('GLIBC_TUNABLES', 'T2T_HUGE_PAGES')}
  tunables, _, *args = _child(env)
  assert tunables == 'glibc.malloc.hugetlb=1'
  assert ' '.join(args) == "['x', '--y=1']"
  assert _child(dict(env, T2T_HUGE_PAGES='0'))[0] == 'None'

"""`jax.jit` of a function whose first argument is a Flax module, static: the module's code
and attributes choose the program, so equal modules share one compiled program.

jit keys its cache by hashing static arguments, and a module hashes its attributes: a
user's module holding a list or a dict cannot be hashed. Such a module is compiled for that
call alone, as if the function were jitted around it then, instead of failing.
"""

import functools
from typing import Callable, Optional, Sequence

import jax


def jit_on_module(fn: Optional[Callable] = None, *, static_argnums: Sequence[int] = (),
                  static_argnames: Sequence[str] = ()) -> Callable:
  """`fn(module, *args, **kwargs)` jitted with `module` (and `static_argnums`, counted with
  the module as 0, and `static_argnames`) static. Its `.bind(module, *statics)` fixes the
  leading static arguments. Without `fn`: a decorator."""
  if fn is None:
    return functools.partial(jit_on_module, static_argnums=static_argnums,
                             static_argnames=static_argnames)
  nums = tuple(sorted({0, *static_argnums}))
  jitted = jax.jit(fn, static_argnums=nums, static_argnames=tuple(static_argnames))

  @functools.wraps(fn)
  def call(module, *args, **kwargs):
    try:
      hash(module)
    except TypeError:  # an unhashable attribute: no cache to share, compiled for this call
      return jax.jit(functools.partial(fn, module), static_argnums=tuple(n - 1 for n in nums if n),
                     static_argnames=tuple(static_argnames))(*args, **kwargs)
    return jitted(module, *args, **kwargs)

  def bind(*leading):
    """`call` with its first arguments fixed (the module first, all of them static), as one
    jitted function with `.lower`: the shared programs when they hash, else a jit of its own,
    compiled once for the bound function (as a closure jitted around them would be) instead
    of at every call."""
    try:
      hash(leading)
    except TypeError:
      k = len(leading)
      return jax.jit(functools.partial(fn, *leading),
                     static_argnums=tuple(n - k for n in nums if n >= k),
                     static_argnames=tuple(static_argnames))
    bound = functools.partial(jitted, *leading)
    bound.lower = functools.partial(jitted.lower, *leading)
    return bound
  call.bind = bind
  return call

"""The autodiff tour: the same computations on NumPy, JAX and PyTorch, side by side.

Run ``python -m scripts.autodiff_tour`` (or ``xpseq tour``); ``--list`` lists the lessons,
``--lesson N`` runs one of them and ``--code`` prints each lesson's code before its table.
Each lesson runs one small computation on all three libraries and prints what it measured
in a table with the columns

``what`` | ``numpy (xpseq by hand)`` | ``jax`` | ``torch``

NumPy has no automatic differentiation; its column is xpseq's own hand-derived backward
rules (:mod:`xpseq.core.vjp`), central differences (:mod:`xpseq.testing`) or plain NumPy
where that is the point. ``-`` marks a library that has no equivalent (the row label says
why) and ``not installed`` a library that is missing.

Nothing printed is typed in: every value comes from running the code, and each lesson
returns the values it measured as :attr:`Lesson.facts`, which ``tests/test_tour.py`` checks
against independent truths on the installed versions. JAX is used through
``xpseq.backends.get("jax")``, which turns on 64-bit mode for the process (xpseq's
convention); lesson 6 shows JAX *without* it in a subprocess, so the flag is never toggled
here.

Each lesson is one module of this package, named after what it teaches:

======================  ===========================================================
module                  contents
======================  ===========================================================
``transform_tape_vjp``  1. a function transform, a tape and a hand-derived VJP
``kinks``               2. derivatives at kinks are conventions
``where_nan``           3. NaN through ``where``, and the double-``where`` repair
``masked_rows``         4. a fully masked attention row; :func:`describe_row`
``inf_fill``            5. a finite loss with a NaN gradient under a −inf fill
``silent_float32``      6. JAX's silent float32 without x64
``float64_checks``      7. why gradient checks need float64
``mutation``            8. mutation: in-place version checks, immutable arrays
``retracing``           9. tracing and retracing under ``jax.jit``
``unroll_vs_scan``      10. an unrolled Python loop vs ``lax.scan``
``prng``                11. explicit PRNG keys vs global generators
``forward_reverse``     12. forward mode (JVP) vs reverse mode (VJP)
``broadcast_sum``       13. broadcasting in the forward is a sum in the backward
``bfloat16``            14. bfloat16's 8 bits, and what mixed precision keeps in float32
``kv_cache``            15. the causal mask and the key/value cache give the same logits
``layer_norm_vjp``      16. layer norm's backward by hand, against jax, torch and differences
``online_softmax``      17. attention in blocks: exact, and a backward that recomputes
``_common``             :class:`Lesson`, the registry, the table and its number formats
``cli``                 :func:`format_lesson` and :func:`main` (the command line)
======================  ===========================================================

A lesson registers itself in :data:`LESSONS` when its module is imported, so the modules
are imported below in tour order; a new lesson is a module with one function decorated
``@register_lesson(number, title, code=(...))`` (from ``_common``), imported below in its
place. ``code`` names the lesson's short functions (one per library where the libraries
differ, each with a docstring), which ``xpseq tour --code`` prints (:func:`format_code`) and
the docs pages include; the lesson body calls them and fills the table.
"""

from __future__ import annotations

from ._common import (
    FRAMEWORKS,
    HEADERS,
    LESSONS,
    NONE,
    NOT_INSTALLED,
    Lesson,
    LessonFn,
    code_sections,
    installed,
)

# isort: off
# Tour order: each import appends its lesson to LESSONS.
from .transform_tape_vjp import lesson_transform_tape_vjp
from .kinks import lesson_kinks
from .where_nan import lesson_where_nan
from .masked_rows import describe_row, lesson_masked_rows
from .inf_fill import lesson_inf_fill
from .silent_float32 import lesson_silent_float32
from .float64_checks import STEPS, lesson_float64_checks
from .mutation import lesson_mutation
from .retracing import CALLS, lesson_retracing
from .unroll_vs_scan import LENGTHS, lesson_unroll_vs_scan
from .prng import lesson_prng
from .forward_reverse import lesson_forward_reverse
from .broadcast_sum import lesson_broadcast_sum
from .bfloat16 import ONES, lesson_bfloat16
from .kv_cache import lesson_kv_cache
from .layer_norm_vjp import lesson_layer_norm_vjp
from .online_softmax import lesson_online_softmax
# isort: on

from .cli import format_code, format_lesson, main

__all__ = ["Lesson", "LESSONS", "FRAMEWORKS", "format_lesson", "installed", "main",
           "LessonFn", "HEADERS", "NOT_INSTALLED", "NONE", "describe_row", "STEPS", "CALLS",
           "LENGTHS", "lesson_transform_tape_vjp", "lesson_kinks", "lesson_where_nan",
           "lesson_masked_rows", "lesson_inf_fill", "lesson_silent_float32",
           "lesson_float64_checks", "lesson_mutation", "lesson_retracing",
           "lesson_unroll_vs_scan", "lesson_prng", "lesson_forward_reverse",
           "lesson_broadcast_sum", "lesson_bfloat16", "ONES", "lesson_kv_cache",
           "lesson_layer_norm_vjp", "lesson_online_softmax", "format_code", "code_sections"]


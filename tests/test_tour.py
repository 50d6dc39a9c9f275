"""The autodiff tour: each lesson's key facts, checked against independent truths.

Every lesson runs once per test session (a module-level cache); the tests recompute what
they can from the lesson's own inputs (stored in its facts) with plain NumPy and
arithmetic, and compare. Where a library's behaviour is a convention rather than a
mathematical truth (kinks, masked attention rows), the test checks the lesson against the
library itself and against the documented choices.
"""

from __future__ import annotations

import functools
import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from xpseq import tour
from xpseq.testing import central_difference_grad

ROOT = pathlib.Path(__file__).resolve().parents[1]


@functools.cache
def run(number: int) -> tour.Lesson:
    """Lesson ``number``, computed once per session."""
    (fn,) = [fn for fn in tour.LESSONS if fn.number == number]
    return fn()


def facts(number: int) -> dict:
    return run(number).facts


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x))
    return e / e.sum()


# --------------------------------------------------------------------- structure


def test_at_least_twelve_lessons_numbered_in_order_with_distinct_titles():
    numbers = [fn.number for fn in tour.LESSONS]
    assert len(numbers) >= 12
    assert numbers == list(range(1, len(numbers) + 1))
    titles = [fn.title for fn in tour.LESSONS]
    assert len(set(titles)) == len(titles)


@pytest.mark.parametrize("number", range(1, len(tour.LESSONS) + 1))
def test_lesson_shape_one_sentence_and_table(number):
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    lesson = run(number)
    assert isinstance(lesson, tour.Lesson) and lesson.number == number
    text = lesson.explanation
    assert "\n" not in text and text.endswith(".")
    assert not re.search(r"[.!?]\s+[A-Z]", text), f"more than one sentence: {text}"
    assert "n/a" not in text                      # every library it quotes was measured
    assert lesson.rows and lesson.facts
    for row in lesson.rows:
        assert len(row) == 4 and all(isinstance(c, str) and c for c in row)
        assert tour.NOT_INSTALLED not in row
    printed = tour.format_lesson(lesson)
    assert printed.startswith(f"Lesson {number}. {lesson.title}")
    for header in tour.HEADERS:
        assert header in printed
    flat = " ".join(printed.split())
    for row in lesson.rows:                        # every cell is printed (maybe wrapped)
        for cell in row:
            assert " ".join(cell.split()) in flat or all(w in flat for w in cell.split())


def test_lessons_run_without_jax_and_torch(monkeypatch):
    """A missing library shows as "not installed" in its column; nothing raises."""
    monkeypatch.setattr(tour, "installed", lambda name: name == "numpy")
    for fn in tour.LESSONS:
        lesson = fn()
        assert lesson.rows
        for label, numpy_cell, jax_cell, torch_cell in lesson.rows:
            assert numpy_cell != tour.NOT_INSTALLED
            assert jax_cell in (tour.NOT_INSTALLED, tour.NONE)
            assert torch_cell in (tour.NOT_INSTALLED, tour.NONE)
        assert not any(k.startswith(("jax_", "torch_")) for k in lesson.facts)
        assert any(k.startswith("numpy_") for k in lesson.facts)


# --------------------------------------------------------------------------- main


def test_main_lists_lessons_without_running_them(capsys):
    assert tour.main(["--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(tour.LESSONS)
    assert lines[0].strip().startswith("1. ") and tour.LESSONS[0].title in lines[0]


def test_main_runs_one_lesson_and_prints_versions(capsys):
    assert tour.main(["--lesson", "9"]) == 0
    out = capsys.readouterr().out
    assert "numpy " + np.__version__ in out
    assert "Lesson 9." in out and "Lesson 8." not in out
    assert "1 lesson(s) in" in out


def test_main_rejects_an_unknown_lesson(capsys):
    assert tour.main(["--lesson", str(len(tour.LESSONS) + 1)]) == 2
    assert "no lesson" in capsys.readouterr().err


def test_xpseq_tour_is_the_same_command(capsys):
    from xpseq.app import cli

    assert cli.main(["tour", "--list"]) == 0
    listed = capsys.readouterr().out.strip().splitlines()
    assert len(listed) == len(tour.LESSONS)
    assert cli.main(["tour", "--lesson", "9"]) == 0
    assert "Lesson 9." in capsys.readouterr().out


def test_script_lists_the_lessons():
    done = subprocess.run([sys.executable, "-m", "scripts.autodiff_tour", "--list"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.strip().splitlines()) == len(tour.LESSONS)


# ------------------------------------------------------------ 1. transform vs tape


def test_lesson1_three_ways_give_the_analytic_gradient():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(1)
    X, W = np.asarray(f["X"]), np.asarray(f["W"])
    analytic = (1.0 - np.tanh(X @ W.T) ** 2).T @ X          # dΣtanh(XWᵀ)/dW
    fd = central_difference_grad(lambda w: float(np.sum(np.tanh(X @ w.T))), W)
    for name in ("numpy", "jax", "torch"):
        np.testing.assert_allclose(f[f"{name}_grad"], analytic, rtol=1e-12, atol=1e-14)
        assert f[f"{name}_value"] == pytest.approx(np.sum(np.tanh(X @ W.T)), rel=1e-12)
    np.testing.assert_allclose(f["numpy_grad"], fd, rtol=1e-7, atol=1e-9)
    assert f["jax_max_diff_vs_numpy"] < 1e-12 and f["torch_max_diff_vs_numpy"] < 1e-12


def test_lesson1_tape_accumulates_and_frees_while_transforms_do_not():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(1)
    slope = 3.0                                              # d(3x)/dx
    assert f["torch_grad_accumulates"] == [slope * k for k in (1, 2, 3)]
    assert f["jax_repeated_grads"] == [slope] * 3
    assert f["numpy_repeated_grads"] == [slope] * 3
    assert f["numpy_second_backprop_same"] is True
    assert f["second_backward_error"] == "RuntimeError"
    assert "second time" in f["second_backward_message"]
    x = 2.0                                                  # d(x²)/dx = 2x, accumulated
    assert f["torch_retain_graph_grads"] == [2 * x, 2 * (2 * x)]
    assert f["jax_second_vjp"] == [2 * x, 2 * x]


# ------------------------------------------------------------------------ 2. kinks


def test_lesson2_central_difference_is_the_mean_of_one_sided_slopes():
    f = facts(2)
    assert f["numpy_abs"] == pytest.approx((-1.0 + 1.0) / 2, abs=1e-9)
    assert f["numpy_relu"] == pytest.approx((0.0 + 1.0) / 2, abs=1e-9)
    assert f["numpy_clamp"] == pytest.approx((0.0 + 1.0) / 2, abs=1e-9)
    assert f["numpy_norm"] == pytest.approx([0.0, 0.0], abs=1e-9)


def test_lesson2_jax_conventions_are_what_jax_gives_and_documented_choices():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    f = facts(2)
    assert f["jax_abs"] == float(jax.grad(jnp.abs)(0.0))
    assert f["jax_relu"] == float(jax.grad(jax.nn.relu)(0.0))
    assert f["jax_clamp"] == float(jax.grad(lambda x: jnp.clip(x, 0.0, 1.0))(0.0))
    for key in ("jax_abs", "jax_relu", "jax_clamp"):
        assert f[key] in (0.0, 0.5, 1.0)          # a one-sided slope or their mean
    norm = np.asarray(f["jax_norm"])
    assert np.all(np.isnan(norm)) or np.all(norm == 0.0)


def test_lesson2_torch_conventions_are_what_torch_gives_and_documented_choices():
    torch = pytest.importorskip("torch")
    f = facts(2)
    for name, fn in (("abs", torch.abs), ("relu", torch.relu),
                     ("clamp", lambda x: torch.clamp(x, 0.0, 1.0))):
        x = torch.zeros((), dtype=torch.float64, requires_grad=True)
        fn(x).backward()
        assert f[f"torch_{name}"] == float(x.grad)
        assert f[f"torch_{name}"] in (0.0, 0.5, 1.0)
    assert f["torch_abs"] == 0.0 and f["torch_relu"] == 0.0      # sign(0) = 0; relu'(0) = 0
    assert f["torch_norm"] == [0.0, 0.0]                          # the zero subgradient


# ------------------------------------------------------------------ 3. where NaN


def test_lesson3_one_where_gives_nan_the_double_where_repairs_it():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(3)
    assert f["x"] == [0.0, 0.5]
    slope = math.log(0.5) + 1.0                              # d(x log x)/dx at 0.5
    for name in ("numpy", "jax", "torch"):
        assert f[f"{name}_value"] == pytest.approx(0.5 * math.log(0.5), rel=1e-14)
        naive, double = f[f"{name}_naive_grad"], f[f"{name}_double_grad"]
        assert math.isnan(naive[0]) and naive[1] == pytest.approx(slope, rel=1e-14)
        assert double == pytest.approx([0.0, slope], rel=1e-14)


# ----------------------------------------------------------- 4. masked attention


def test_lesson4_row_classifier():
    values = np.array([[1.0, 2.0], [3.0, 6.0]])
    assert tour.describe_row(np.zeros(2), values) == "zeros"
    assert tour.describe_row(np.full(2, np.nan), values) == "NaN"
    assert tour.describe_row(np.array([2.0, 4.0]), values) == "mean of values"
    assert tour.describe_row(np.array([1.0, 2.0]), values) == "other"


def test_lesson4_xpseq_policy_on_every_backend():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(4)
    q, k, v = (np.asarray(f[n]) for n in ("q", "k", "v"))
    mask = np.asarray(f["mask"])
    assert not mask[0, 1].any()                              # query 1 has no valid key
    kept = mask[0, 0]
    weights = softmax((q[0, 0] @ k[0].T / math.sqrt(q.shape[-1]))[kept])
    expected_valid = weights @ v[0][kept]
    for name in ("numpy", "jax", "torch"):
        assert f[f"{name}_xpseq_zero"] == "zeros"
        assert f[f"{name}_xpseq_zero_weights"] == "zeros"
        assert f[f"{name}_xpseq_error"] == "ValueError"
        assert "no valid key" in f[f"{name}_xpseq_error_message"]
        np.testing.assert_allclose(f[f"{name}_xpseq_valid_row"], expected_valid, rtol=1e-12)


def test_lesson4_native_apis_on_the_installed_versions():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(4)
    # Observed on torch 2.13 / jax 0.10: SDPA zeros, MultiheadAttention NaN, JAX the mean.
    assert f["torch_sdpa_empty_row"] == "zeros"
    assert f["torch_mha_out"] == "NaN" and f["torch_mha_weights"] == "NaN"
    assert f["jax_dpa_empty_row"] == "mean of values"
    v = np.asarray(f["v"])[0]
    assert f["jax_dpa_mean_diff"] < 1e-6 * np.max(np.abs(v))
    assert f["torch_sdpa_valid_diff"] < 1e-12             # valid rows agree with xpseq
    assert f["jax_dpa_valid_diff"] < 1e-6                  # (JAX's softmax runs in float32)


# ---------------------------------------------------- 5. finite loss, NaN gradient


def test_lesson5_finite_loss_nan_gradient_only_with_an_additive_mask():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(5)
    scores, keep = np.asarray(f["scores"]), np.asarray(f["keep"])
    (row,) = np.flatnonzero(f["real"])
    (padding,) = np.flatnonzero(~np.asarray(f["real"]))
    assert not keep[padding].any()
    p = np.zeros(scores.shape[1])
    p[keep[row]] = softmax(scores[row][keep[row]])
    target = f["targets"][row]
    loss = -math.log(p[target])
    real_grad = p - np.eye(len(p))[target]                   # softmax − one-hot
    for name in ("numpy", "jax", "torch"):
        assert f[f"{name}_loss"] == pytest.approx(loss, rel=1e-12)
        for fill in ("additive", "where", "xpseq"):
            np.testing.assert_allclose(f[f"{name}_{fill}_real_grad"], real_grad, atol=1e-14)
        assert f[f"{name}_xpseq_padding_grad"] == [0.0] * len(p)
        assert f[f"{name}_where_padding_grad"] == [0.0] * len(p)
    for name in ("jax", "torch"):
        assert all(math.isnan(g) for g in f[f"{name}_additive_padding_grad"])
    assert f["numpy_additive_padding_grad"] == [0.0] * len(p)   # xpseq's rule: no NaN
    assert f["torch_ce_loss"] == pytest.approx(loss, rel=1e-12)
    assert all(math.isnan(g) for g in f["torch_ce_padding_grad"])


# --------------------------------------------------------------- 6. silent float32


def test_lesson6_jax_without_x64_gives_float32_and_the_process_keeps_x64():
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    f = facts(6)
    assert f["jax_x64_flag_in_probe"] is False
    assert f["jax_from_numpy"] == "float32" and f["jax_python_float"] == "float32"
    assert f["jax_explicit"] == "float32"
    assert "float64" in f["jax_explicit_warning"]
    assert f["jax_from_numpy_warning"] == ""                   # the silent one
    assert f["jax_from_numpy_with_x64"] == "float64"
    assert jax.config.jax_enable_x64             # the suite's own setting, left as it was
    assert {f[f"numpy_{k}"] for k in ("from_numpy", "python_float", "explicit")} == {"float64"}
    assert f["torch_from_numpy"] == "float64" and f["torch_explicit"] == "float64"
    assert f["torch_python_float"] == str(torch.get_default_dtype()).replace("torch.", "")


# ----------------------------------------------------------- 7. float64 grad checks


def test_lesson7_float32_finite_differences_are_far_coarser():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(7)
    x32 = np.float32(f["point"])
    exact32 = math.exp(float(x32)) * (math.sin(float(x32)) + math.cos(float(x32)))
    for name in ("numpy", "jax", "torch"):
        best32, best64 = f[f"{name}_best_err_float32"], f[f"{name}_best_err_float64"]
        assert 1e-7 < best32 < 1e-3
        assert best64 < 1e-9
        assert best32 / best64 > 1e4
        assert f[f"{name}_best_h_float32"] > f[f"{name}_best_h_float64"]
        assert min(f[f"{name}_errors_float32"]) == best32
        # Where x ± h rounds back to x in float32 the difference quotient is exactly 0.
        for h, err in zip(f["steps"], f[f"{name}_errors_float32"]):
            if x32 + np.float32(h) == x32 and x32 - np.float32(h) == x32:
                assert err == pytest.approx(abs(exact32), rel=1e-12)
        assert f[f"{name}_autodiff_err_float32"] < 1e-5
        assert f[f"{name}_autodiff_err_float64"] < 1e-13


# ---------------------------------------------------------------------- 8. mutation


def test_lesson8_mutation():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(8)
    y = np.tanh(np.asarray(f["x"]))
    # tanh's rule computes 1 − y²; after y += 1 it reads y + 1 instead.
    expected = np.max(np.abs((1 - (y + 1) ** 2) - (1 - y ** 2)))
    assert f["numpy_grad_change_after_mutation"] == pytest.approx(expected, rel=1e-12)
    assert f["numpy_setitem_ok"] and f["numpy_readonly_error"] == "ValueError"
    assert f["jax_setitem_error"] == "TypeError"
    assert f["jax_original_unchanged"] and f["jax_at_set_value"] == 5.0
    assert f["torch_setitem_ok"]
    assert f["torch_version_after"] == f["torch_version_before"] + 1
    assert f["torch_inplace_error"] == "RuntimeError"
    assert "inplace operation" in f["torch_inplace_message"]
    assert f["torch_leaf_inplace_error"].startswith("RuntimeError")


# --------------------------------------------------------------------- 9. retracing


def test_lesson9_jit_traces_once_per_new_shape_and_dtype():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(9)
    signatures = [(tuple(shape), dtype) for shape, dtype in f["calls"]]
    distinct_so_far = [len(set(signatures[:i + 1])) for i in range(len(signatures))]
    assert f["jax_traces_after_each_call"] == distinct_so_far
    calls_so_far = list(range(1, len(signatures) + 1))
    assert f["numpy_runs_after_each_call"] == calls_so_far
    assert f["torch_runs_after_each_call"] == calls_so_far


# ----------------------------------------------------------- 10. unrolled vs scan


def test_lesson10_unrolled_program_grows_with_length_scan_does_not():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(10)
    lengths, unrolled, scan = f["lengths"], f["jax_unrolled_eqns"], f["jax_scan_eqns"]
    per_step = [(unrolled[i] - unrolled[0]) / (lengths[i] - lengths[0])
                for i in range(1, len(lengths))]
    assert per_step[0] >= 1 and all(s == per_step[0] for s in per_step)  # linear in T
    assert len(set(scan)) == 1 and scan[0] < unrolled[0]
    assert all(t > 0 for t in f["jax_unrolled_compile_ms"] + f["jax_scan_compile_ms"])
    assert max(f["jax_final_diff"]) < 1e-12
    W, xs = np.asarray(f["W"]), np.asarray(f["xs"])
    for i, T in enumerate(lengths):
        h = np.zeros(W.shape[0])
        for t in range(T):
            h = np.tanh(W @ h + xs[t])
        for name in ("numpy", "jax", "torch"):
            np.testing.assert_allclose(f[f"{name}_final_h"][i], h, rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------- 11. PRNG


def test_lesson11_keys_are_values_global_generators_are_state():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(11)
    for name in ("numpy", "jax", "torch"):
        assert f[f"{name}_reseed_same"] is True
        assert f[f"{name}_dropout_keep_repeatable"] is True
    assert f["jax_consecutive_same"] is True                 # same key, same numbers
    assert f["numpy_consecutive_same"] is False and f["torch_consecutive_same"] is False
    assert f["jax_unrelated_same"] is True and f["numpy_unrelated_same"] is True
    assert f["torch_unrelated_same"] is False                # the global stream moved
    assert f["jax_split_same"] is False and f["jax_child_equals_parent"] is False
    assert f["numpy_split_same"] is False


def test_lesson11_leaves_torch_global_generator_alone():
    torch = pytest.importorskip("torch")
    torch.manual_seed(123)
    expected = torch.randn(3)
    torch.manual_seed(123)
    tour.lesson_prng()
    assert torch.equal(torch.randn(3), expected)


# ------------------------------------------------------------- 12. forward, reverse


def test_lesson12_jvp_and_vjp_match_the_analytic_jacobian():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(12)
    A, x, v, u = (np.asarray(f[n]) for n in ("A", "x", "v", "u"))
    J = (1.0 - np.tanh(A @ x) ** 2)[:, None] * A              # d tanh(Ax)/dx
    for name in ("numpy", "jax", "torch"):
        np.testing.assert_allclose(f[f"{name}_jvp"], J @ v, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(f[f"{name}_vjp"], u @ J, rtol=1e-12, atol=1e-15)
        assert f[f"{name}_dot_test"] < 1e-12
    assert f["jax_jac_fwd_rev_diff"] < 1e-12 and f["torch_jac_fwd_rev_diff"] < 1e-12
    assert f["numpy_jac_fwd_rev_diff"] < 1e-7                 # central difference vs VJPs
    assert f["numpy_vjps_for_jacobian"] == len(u)


# ------------------------------------------------------------ 13. broadcasting sums


def test_lesson13_bias_gradient_is_the_cotangent_summed_over_broadcast_axes():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(13)
    G = np.asarray(f["G"])
    expected = G.reshape(-1, G.shape[-1]).sum(axis=0)
    for name in ("numpy", "jax", "torch"):
        np.testing.assert_allclose(f[f"{name}_db"], expected, rtol=1e-12, atol=1e-14)
        assert f[f"{name}_db_shape"] == f["b_shape"]
        assert f[f"{name}_db_max_diff"] < 1e-12
    np.testing.assert_allclose(f["jax_dW"], f["numpy_dW"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(f["torch_dW"], f["numpy_dW"], rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------ 14. bfloat16


def _round_to_bfloat16(v: float) -> float:
    """``v`` rounded to 8 significant bits, half to even (plain Python: ``math.frexp``)."""
    mantissa, exponent = math.frexp(v)              # v = mantissa · 2^exponent, 0.5 <= |m| < 1
    return round(mantissa * 256) / 256 * 2.0 ** exponent


def test_lesson14_bfloat16_spacing_stalled_sum_product_error_and_exact_count():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(14)
    from xpseq.tour._common import normal_samples

    x, y = (normal_samples(seed, 256).astype(np.float32).astype(np.float64) for seed in (141, 142))
    rounded = sum(_round_to_bfloat16(a) * _round_to_bfloat16(b) for a, b in zip(x, y))
    exact = math.fsum(float(a) * float(b) for a, b in zip(x, y))
    for name in ("numpy", "jax", "torch"):
        assert f[f"{name}_eps"] == 2.0 ** -7
        assert f[f"{name}_one_plus"] == 1.0                 # 1 + 2^-8 ties to even: 1
        assert f[f"{name}_running_sum"] == 256.0            # 256 + 1 rounds back to 256
        assert f[f"{name}_dot_rel_err"] == pytest.approx(abs(rounded - exact) / abs(exact),
                                                         rel=1e-9)
    assert f["numpy_count"] is None
    assert f["jax_count"] == f["torch_count"] == f["ones"] == 301


# ------------------------------------------------------------------ each lesson's code


def test_every_lesson_registers_short_functions_of_its_own_module():
    import inspect

    for fn in tour.LESSONS:
        assert fn.code, f"lesson {fn.number} registers no code"
        for f in fn.code:
            assert inspect.isfunction(f)
            assert f.__module__ == fn.__module__, (fn.number, f.__name__)
            assert f.__doc__, f"{f.__name__} has no docstring"
            lines = inspect.getsource(f).splitlines()
            assert len(lines) <= 25, f"{f.__name__} is {len(lines)} lines long"


def test_code_sections_group_the_functions_by_library():
    from xpseq.tour.kinks import jax_kink_slopes, numpy_kink_slopes, torch_kink_slopes

    (fn,) = [fn for fn in tour.LESSONS if fn.number == 2]
    sections = dict(tour.code_sections(fn))
    assert list(sections) == ["NumPy (xpseq by hand)", "JAX", "PyTorch"]
    assert sections["JAX"][0].startswith("def jax_kink_slopes(")
    assert fn.code == (numpy_kink_slopes, jax_kink_slopes, torch_kink_slopes)


def test_main_code_prints_the_functions_then_the_table(capsys):
    assert tour.main(["--lesson", "2", "--code"]) == 0
    out = capsys.readouterr().out
    (fn,) = [fn for fn in tour.LESSONS if fn.number == 2]
    starts = [out.index(f"def {f.__name__}(") for f in fn.code]
    assert starts == sorted(starts)
    for heading in ("# --- NumPy (xpseq by hand)", "# --- JAX", "# --- PyTorch"):
        assert heading in out
    table = out.index("Lesson 2. " + fn.title + "\n")
    assert table > starts[-1]                        # the code, then the table
    assert all(header in out[table:] for header in tour.HEADERS)
    assert "central_difference_grad" in out and "jax.grad" in out


def test_xpseq_tour_forwards_code(capsys):
    from xpseq.app import cli

    assert cli.main(["tour", "--lesson", "9", "--code"]) == 0
    out = capsys.readouterr().out
    assert "def jax_traces(" in out and "Lesson 9." in out


# ------------------------------------------------------- 15. causal mask, KV cache


def test_lesson15_cache_and_teacher_forcing_equal_recomputing_each_prefix():
    """A decoder run on the prefix ``tgt_in[:, :t + 1]`` alone has no future to see, with or
    without a mask or a cache: its last position is the truth for position ``t``."""
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    from xpseq.models import transformer as TM

    f = facts(15)
    config = TM.TransformerConfig.from_dict(f["config"])
    params = TM.init_params(config, seed=f["seed"])
    src, src_len, tgt_in = (np.asarray(f[k]) for k in ("src", "src_len", "tgt_in"))
    truth = []
    for t in range(tgt_in.shape[1]):
        logits, _ = TM.forward(params, config, src, src_len, tgt_in[:, :t + 1])
        last = logits[:, -1, :]
        top = last.max(axis=-1, keepdims=True)
        truth.append(last - top - np.log(np.exp(last - top).sum(axis=-1, keepdims=True)))
    truth = np.stack(truth, axis=1)
    for name in ("numpy", "jax", "torch"):
        np.testing.assert_allclose(f[f"{name}_teacher_forced"], truth, rtol=0, atol=1e-12)
        np.testing.assert_allclose(f[f"{name}_step_by_step"], truth, rtol=0, atol=1e-12)
        assert f[f"{name}_cache_max_diff"] <= 1e-12
        assert f[f"{name}_future_change_max_diff"] <= 1e-12
    assert f["numpy_growing_cache_max_diff"] <= 1e-12
    assert f["torch_growing_cache_max_diff"] <= 1e-12
    changed = tgt_in[2:, -1] != tgt_in[:2, -1]
    assert (tgt_in[2:, :-1] == tgt_in[:2, :-1]).all() and changed.all()


def test_lesson15_attention_without_the_mask_reads_the_future():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(15)
    q, k, v = (np.asarray(f[n]) for n in ("q", "k", "v"))
    T = q.shape[0]
    scores = q @ k.T / math.sqrt(q.shape[-1])
    leaky = np.stack([softmax(scores[t]) @ v for t in range(T)])
    causal = np.stack([softmax(scores[t, :t + 1]) @ v[:t + 1] for t in range(T)])
    leak = np.max(np.abs(leaky[:-1] - causal[:-1]))
    assert leak > 0.1
    for name in ("numpy", "jax", "torch"):
        np.testing.assert_allclose(f[f"{name}_leaky"], leaky, rtol=0, atol=1e-12)
        np.testing.assert_allclose(f[f"{name}_masked"], causal, rtol=0, atol=1e-12)
        assert f[f"{name}_masked_vs_cache_diff"] <= 1e-12
        assert f[f"{name}_leak_vs_cache_diff"] == pytest.approx(leak, rel=1e-9)
        assert f[f"{name}_leak_last_row_diff"] <= 1e-12       # the last row has no future


# ----------------------------------------------------------- 16. layer norm's VJP


def test_lesson16_hand_derived_layer_norm_matches_autodiff_and_differences():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(16)
    x, gamma, beta, dy = (np.asarray(f[n]) for n in ("x", "gamma", "beta", "dy"))

    def loss(x, gamma, beta):
        mu, var = x.mean(-1, keepdims=True), ((x - x.mean(-1, keepdims=True)) ** 2).mean(-1, keepdims=True)
        return float(np.sum(dy * (gamma * (x - mu) / np.sqrt(var + f["eps"]) + beta)))

    fd = {"dx": central_difference_grad(lambda a: loss(a, gamma, beta), x),
          "dgamma": central_difference_grad(lambda a: loss(x, a, beta), gamma)}
    for name in ("numpy", "jax", "torch"):
        for key, expected in fd.items():
            np.testing.assert_allclose(f[f"{name}_{key}"], expected, rtol=0, atol=1e-7)
        np.testing.assert_allclose(f[f"{name}_dbeta"], dy.sum(axis=(0, 1)), rtol=0, atol=1e-12)
        for other in ("numpy", "jax", "torch"):
            for key in ("dx", "dgamma", "dbeta"):
                np.testing.assert_allclose(f[f"{name}_{key}"], f[f"{other}_{key}"], rtol=0,
                                           atol=1e-12)
        # The output does not change when x is shifted along its features: Σ dx = 0.
        assert np.max(np.abs(f[f"{name}_dx_feature_sum"])) <= 1e-12
    assert f["jax_max_diff_vs_numpy"] <= 1e-12 and f["torch_max_diff_vs_numpy"] <= 1e-12
    assert f["numpy_fd_max_diff"] <= 1e-7


# ------------------------------------------------------------ 17. online softmax


def test_lesson17_blockwise_attention_is_exact_and_keeps_no_weights():
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    f = facts(17)
    q, k, v, d_out = (np.asarray(f[n]) for n in ("q", "k", "v", "d_out"))
    # Softmax attention and its gradient written out here, row by row.
    s = q @ k.T / math.sqrt(f["d"])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dp = d_out @ v.T
    ds = p * (dp - (dp * p).sum(axis=1, keepdims=True))
    expected = (ds @ k / math.sqrt(f["d"]), ds.T @ q / math.sqrt(f["d"]), p.T @ d_out)
    for name in ("numpy", "jax", "torch"):
        np.testing.assert_allclose(f[f"{name}_context"], p @ v, rtol=0, atol=1e-13)
        for got, want in zip(f[f"{name}_grads"], expected):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        assert f[f"{name}_context_diff"] <= 1e-13 and f[f"{name}_grad_diff"] <= 1e-12
        # The plain backward keeps the (n, n) weights; the blockwise rule keeps q, k, v,
        # the context (n, d each) and the rows' log-sum-exp (n), in float64.
        assert f[f"{name}_plain_kept"] >= f["weights_bytes"]
        assert f[f"{name}_blockwise_kept"] <= (4 * f["n"] * f["d"] + f["n"]) * 8 + 1024


# --------------------------------------------------------------------------- docs


def test_every_lesson_has_a_docs_page_with_its_code_and_table():
    overview = (ROOT / "docs" / "tutorials" / "autodiff-tour.md").read_text(encoding="utf-8")
    for fn in tour.LESSONS:
        page = ROOT / "docs" / "tour" / f"lesson-{fn.number:02d}.md"
        assert page.is_file(), f"lesson {fn.number} has no page"
        text = page.read_text(encoding="utf-8")
        assert f"# Lesson {fn.number}. {fn.title}\n" in text
        module = fn.__module__.rsplit(".", 1)[1]
        for f in fn.code:                            # each function, from its own module
            assert f"{{literalinclude}} ../../xpseq/tour/{module}.py\n:language: python\n" \
                   f":pyobject: {f.__name__}\n" in text, (page.name, f.__name__)
        assert f"from xpseq.tour.{module} import {fn.__name__}\n" in text
        assert f"print(format_lesson({fn.__name__}()))\n```" in text
        assert f"../tour/lesson-{fn.number:02d}\n" in overview       # in the toctree
    assert "main([" not in overview.replace('_ = main(["--list"])', "")   # no stray 0

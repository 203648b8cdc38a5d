"""'Plan a server for it': a model that fits no variant here offers a plan; the dialog reads the model's
shape off the UI thread, plans as the choices change (a 70B in BF16 needs 4 H100s for 8 users × 32 k, not
2) and copies the launch command."""

from __future__ import annotations

import shlex

from PySide6.QtGui import QGuiApplication

from app.core.deploy.shape import shape_from_config
from app.core.models.recommend import Variant, assess
from app.ui.discover.model_view import ModelView
from app.ui.discover.plan_dialog import PlanDialog
from tests.core.deploy.configs import LLAMA3_70B
from tests.ui.hub_gui_fixtures import GiB, pool_tasks, profile  # noqa: F401
from tests.ui.test_fit_view import llama3_8b_spec

REPO = "meta-llama/Llama-3.3-70B-Instruct"


def make_dialog(qtbot, tasks, load=None, add_remote=None) -> PlanDialog:
    shape = load or (lambda: shape_from_config(LLAMA3_70B, REPO, source="hub"))
    dialog = PlanDialog(REPO, shape, tasks, add_remote=add_remote)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.shape is not None or "Could not" in dialog.status.text(), timeout=5_000)
    return dialog


def test_the_plan_follows_the_choices_and_copies_a_command_that_parses(qtbot, pool_tasks):  # noqa: F811
    remotes: list[str] = []
    dialog = make_dialog(qtbot, pool_tasks, add_remote=remotes.append)
    dialog.choose(target="h100", gpus=2, users=8, ctx=32768, dtype="bf16")
    assert dialog.plan is not None and not dialog.plan.fits
    assert "does not fit" in dialog.verdict.text() and "needs 4" in dialog.verdict.text()
    assert not dialog.copy_button.isEnabled()
    dialog.choose(gpus=4)
    assert dialog.plan.fits and dialog.verdict.text().startswith("Fits on 4 × H100")
    argv = shlex.split(dialog.command())
    assert argv[:3] == ["vllm", "serve", REPO] and argv[argv.index("--tensor-parallel-size") + 1] == "4"
    assert argv[argv.index("--max-model-len") + 1] == "32768" and argv[argv.index("--max-num-seqs") + 1] == "8"
    assert "vllm serve" in dialog.report.toPlainText() and "tok/s per user" in dialog.report.toPlainText()
    dialog.copy_button.click()
    assert QGuiApplication.clipboard().text() == dialog.command() and dialog.copy_button.text() == "Copied"
    # Once that server runs, one click offers it as a remote at the port the command gave.
    port = argv[argv.index("--port") + 1]
    assert dialog.remote_button.isEnabled()
    dialog.remote_button.click()
    assert remotes == [f"http://gpu-server:{port}"]
    dialog.choose(users=16)
    assert not dialog.plan.fits and "needs 8" in dialog.verdict.text()


def test_a_model_whose_shape_cannot_be_read_says_so(qtbot, pool_tasks):  # noqa: F811
    def fail():
        raise OSError("the Hub is unreachable")

    dialog = make_dialog(qtbot, pool_tasks, load=fail)
    assert "Could not read the model's configuration: the Hub is unreachable" in dialog.status.text()
    assert not dialog.target.isEnabled() and not dialog.copy_button.isEnabled()


def test_the_model_page_offers_a_plan_only_when_nothing_fits(qtbot):
    from app.core.models.devices import machine_from_profile

    view = ModelView()
    qtbot.addWidget(view)
    spec = llama3_8b_spec()
    variant = Variant(label="Q4_K_M", format="gguf", size_bytes=5 * GiB, spec=spec, repo_id=REPO, files=["m.gguf"])
    small = machine_from_profile(profile(ram_total=4 * GiB, ram_free=3 * GiB))
    view.show_model("Big", "", assess([variant], small), small)
    view.show()
    assert view.plan_button.isVisible()
    with qtbot.waitSignal(view.plan_requested) as got:
        view.plan_button.click()
    assert got.args == [REPO]
    big = machine_from_profile(profile(ram_total=64 * GiB, ram_free=60 * GiB))
    view.show_model("Big", "", assess([variant], big), big)
    assert not view.plan_button.isVisible()

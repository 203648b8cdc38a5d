"""The Server page's request log on its own: a request shows as it arrives (in progress, with its time so
far) and its row is filled in where it is once answered; the columns fit their headers and contents."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from app.server.request_log import LoggedRequest, RequestLog, StartedRequest, Timer
from app.ui.server_log import (
    CACHED,
    COLUMNS,
    DRAFTS,
    DURATION,
    IN_PROGRESS,
    REQUEST,
    STATUS,
    RequestLogModel,
    RequestLogView,
)


def test_a_started_request_shows_in_progress_and_its_answer_fills_the_same_row():
    model = RequestLogModel()
    model.add([LoggedRequest(90.0, "GET", "/health", 200, 0.01)], now=100.0)
    started = StartedRequest(7, 100.0, "POST", "/v1/chat/completions")
    model.add([started], now=100.0)
    assert model.rowCount() == 2 and model.in_progress == 1
    assert model.index(0, REQUEST).data() == "POST /v1/chat/completions"
    assert model.index(0, STATUS).data() == IN_PROGRESS and model.index(0, DURATION).data() == "0 ms"
    model.refresh_elapsed(now=128.0)  # a 28 s generation: the row says how long it has been going
    assert model.index(0, DURATION).data() == "28.0 s"
    answer = LoggedRequest(100.0, "POST", "/v1/chat/completions", 200, 28.4, "alpha", 40, 30, id=7)
    model.add([answer], now=128.4)
    assert model.rowCount() == 2 and model.in_progress == 0
    assert model.record(0) is answer and model.index(0, STATUS).data() == "200"
    assert model.index(0, DURATION).data() == "28.4 s" and model.index(0, 3).data() == "40 → 30"
    assert model.record(1).path == "/health"


def test_a_request_answered_between_two_batches_or_within_one_keeps_its_place():
    model = RequestLogModel()
    first, second = StartedRequest(1, 1.0, "GET", "/a"), StartedRequest(2, 2.0, "GET", "/b")
    model.add([first, second])
    # The older one finishes last: it stays below the newer one (rows are by arrival).
    model.add([LoggedRequest(2.0, "GET", "/b", 200, 0.1, id=2), LoggedRequest(1.0, "GET", "/a", 500, 3.0, id=1)])
    assert [model.record(r).path for r in range(2)] == ["/b", "/a"] and model.index(1, STATUS).data() == "500"
    # Started and answered in one batch: one row, the answered one.
    model.add([StartedRequest(3, 3.0, "GET", "/c"), LoggedRequest(3.0, "GET", "/c", 200, 0.1, id=3)])
    assert model.rowCount() == 3 and model.in_progress == 0 and model.record(0).path == "/c"
    # A start that arrives after its answer is already shown (the page opened in between) adds nothing.
    model.add([StartedRequest(3, 3.0, "GET", "/c")])
    assert model.rowCount() == 3 and model.in_progress == 0


def test_the_view_shows_a_request_from_its_start_to_its_answer(qtbot):
    log = RequestLog()
    view = RequestLogView(log)
    qtbot.addWidget(view)
    timer = Timer(log, "POST", "/v1/responses")  # what the server's middleware does as a request arrives
    qtbot.waitUntil(lambda: view.log_model.rowCount() == 1)
    assert view.log_model.index(0, STATUS).data() == IN_PROGRESS
    timer.done(200, "alpha", {"prompt_tokens": 12, "completion_tokens": 5})
    qtbot.waitUntil(lambda: view.log_model.index(0, STATUS).data() == "200")
    assert view.log_model.rowCount() == 1 and view.log_model.record(0).model == "alpha"


def test_cached_and_drafts_columns_appear_once_a_request_has_them(qtbot):
    log = RequestLog()
    view = RequestLogView(log)
    qtbot.addWidget(view)
    assert view.isColumnHidden(CACHED) and view.isColumnHidden(DRAFTS)
    Timer(log, "POST", "/v1/chat/completions").done(200, "m", {"prompt_tokens_details": {"cached_tokens": 9}})
    qtbot.waitUntil(lambda: view.log_model.rowCount() == 1)
    qtbot.waitUntil(lambda: not view.isColumnHidden(CACHED))
    assert view.isColumnHidden(DRAFTS)


def test_at_900_by_600_no_header_is_clipped_and_the_request_column_takes_the_rest(qtbot, themed):
    """The log's width in the real window at 900×600 (the page beside the 196 px sidebar, in its cards)."""
    themed.apply("dark")
    holder = QWidget()
    qtbot.addWidget(holder)
    view = RequestLogView(RequestLog(), parent=holder)
    holder.resize(630, 300)
    view.resize(630, 300)
    holder.show()
    qtbot.waitExposed(holder)
    header = view.horizontalHeader()
    metrics = header.fontMetrics()
    for col, name in enumerate(COLUMNS):
        if not view.isColumnHidden(col):
            assert header.sectionSize(col) >= metrics.horizontalAdvance(name) + 8, name
    assert header.sectionSize(REQUEST) >= view.request_min_width
    assert view.horizontalScrollBar().maximum() == 0  # everything fits: nothing scrolls sideways

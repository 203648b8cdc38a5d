"""Images in the chat window: attached by the Image… button's files, paste or drop, shown as thumbnails in
the composer and the thread, sent to a model that can see (and to none that cannot, with the reason), kept
with the conversation and in its draft."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image
from PySide6.QtCore import QMimeData, QUrl
from PySide6.QtGui import QColor, QImage

from app.core.engines.base import LoadSpec
from app.ui.chat.message_view import SafeDocument
from app.ui.chat.messages_model import image_url
from tests.ui.chat_harness import limit_tokens, new_chat, send_and_wait


def png(color=(200, 30, 60), size=(200, 100)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


def attach(qtbot, page, *paths) -> None:
    before = len(page.composer.attachments.attachments)
    page.attacher.add_files(list(paths))
    qtbot.waitUntil(lambda: len(page.composer.attachments.attachments) == before + len(paths), timeout=5000)


def last_request(h):
    return h.engines[-1].generations[-1]


def test_a_model_without_vision_greys_the_button_and_refuses_pasted_images(make_chat, qtbot):
    _h, page = make_chat()
    button = page.composer.attach_button
    assert not button.isEnabled()
    assert "cannot see images" in button.toolTip() and "model.fake" in button.toolTip()
    mime = QMimeData()
    picture = QImage(8, 8, QImage.Format.Format_RGB32)
    picture.fill(QColor("red"))
    mime.setImageData(picture)
    page.composer.editor.insertFromMimeData(mime)
    assert page.notice.text().startswith("Cannot attach images:") and page.notice.isVisible()
    assert page.composer.attachments.attachments == [] and not page.composer.attachments.isVisible()


def test_an_image_is_sent_shown_in_the_thread_and_kept_after_a_restart(make_chat, qtbot, tmp_path):
    h, page = make_chat(vision=True)
    limit_tokens(page, 8)  # short replies: the follow-up's request holds the whole thread
    assert page.composer.attach_button.isEnabled()
    photo = tmp_path / "photo.png"
    photo.write_bytes(png())
    attach(qtbot, page, photo)
    tile = page.composer.attachments.tiles()[0]
    assert "photo.png · 200×100" in tile.toolTip() and page.composer.send_button.isEnabled()
    page.composer.set_text("What colour?")
    send_and_wait(qtbot, page, None)  # the composer's text and images
    sent = last_request(h).messages[-1]
    assert sent.content == "What colour?" and [i.data for i in sent.images] == [png()]
    assert page.composer.attachments.attachments == []
    user = page.thread_view.rows[-2]
    assert user.image_count == 1
    qtbot.waitUntil(lambda: page.thread_view.rows[-2].thumbnails is not None, timeout=5000)
    thumb = page.thread_view.rows[-2].thumbnails[0]
    assert (thumb.width(), thumb.height()) == (96, 48) and thumb.pixelColor(10, 10).red() == 200
    html = page.thread_view.messages.rendered(page.thread_view.rows[-2]).html
    assert f"src='{image_url(user.id, 0)}' width='96' height='48'" in html
    # The document paints the thumbnail and loads nothing else.
    doc = page.thread_view.view.delegate.document(page.thread_view.rows[-2], page.thread_view.messages)
    assert isinstance(doc, SafeDocument) and not doc.resource(1, QUrl(image_url(user.id, 0))).isNull()

    # A follow-up sends the stored image again (the engine's cache makes it cheap), and a restart keeps it.
    send_and_wait(qtbot, page, "And its shape?")
    history = last_request(h).messages
    assert [m.images and len(m.images) for m in history if m.role == "user"] == [1, None]
    h.close_page(page)
    again = h.open_page()
    again.open_conversation(page.conv_id)
    qtbot.waitUntil(lambda: again.thread_view.rows[0].thumbnails is not None, timeout=5000)
    assert again.thread_view.rows[0].image_count == 1


def test_paste_and_drop_attach_and_a_file_that_is_no_image_is_refused(make_chat, qtbot, tmp_path):
    _h, page = make_chat(vision=True)
    pasted = QMimeData()
    picture = QImage(30, 20, QImage.Format.Format_RGB32)
    picture.fill(QColor("blue"))
    pasted.setImageData(picture)
    page.composer.editor.insertFromMimeData(pasted)
    qtbot.waitUntil(lambda: len(page.composer.attachments.attachments) == 1, timeout=5000)
    assert page.composer.attachments.attachments[0].label == "Pasted image · 30×20"
    assert page.composer.text() == ""

    dropped = tmp_path / "drop.jpg"
    Image.new("RGB", (40, 40), (0, 255, 0)).save(dropped, format="JPEG")
    fake = tmp_path / "fake.png"
    fake.write_text("not a picture")
    files = QMimeData()
    files.setUrls([QUrl.fromLocalFile(str(dropped)), QUrl.fromLocalFile(str(fake))])
    assert page.composer.editor.canInsertFromMimeData(files)
    page.composer.editor.insertFromMimeData(files)
    qtbot.waitUntil(lambda: page.notice.text().startswith("Not attached: fake.png"), timeout=5000)
    qtbot.waitUntil(lambda: len(page.composer.attachments.attachments) == 2, timeout=5000)
    assert [a.name for a in page.composer.attachments.attachments] == ["Pasted image", "drop.jpg"]

    text = QMimeData()
    text.setText("just words")
    page.composer.editor.insertFromMimeData(text)
    assert page.composer.text() == "just words"  # text is typed in, as ever

    page.composer.attachments.tiles()[0].click()  # a click on a tile removes it
    assert [a.name for a in page.composer.attachments.attachments] == ["drop.jpg"]


def test_a_draft_keeps_its_images_with_its_chat_and_an_unseeing_model_waits(make_chat, qtbot, tmp_path):
    h, page = make_chat(vision=lambda path: "text-only" not in path.name)
    send_and_wait(qtbot, page, "hello")
    first = page.conv_id
    photo = tmp_path / "p.bmp"
    Image.new("RGB", (10, 10), (1, 2, 3)).save(photo, format="BMP")
    attach(qtbot, page, photo)
    new_chat(qtbot, page)
    assert page.composer.attachments.attachments == []
    page.open_conversation(first)
    assert [a.name for a in page.composer.attachments.attachments] == ["p.bmp"]

    h.host.load_sync(LoadSpec(path=Path("/nonexistent/text-only.fake"), n_ctx=4096), "fake")
    page.composer.set_text("what is it?")
    qtbot.waitUntil(lambda: "Remove the images" in page.composer.reason.text(), timeout=5000)
    assert not page.composer.send_button.isEnabled() and not page.replies.send()
    assert not page.composer.attach_button.isEnabled()
    assert [a.name for a in page.composer.attachments.attachments] == ["p.bmp"]  # nothing lost


def test_edit_and_resend_keeps_the_images_of_the_message(make_chat, qtbot, tmp_path):
    h, page = make_chat(vision=True)
    photo = tmp_path / "cat.png"
    photo.write_bytes(png((9, 9, 9)))
    attach(qtbot, page, photo)
    page.composer.set_text("Who is this?")
    send_and_wait(qtbot, page, None)
    page.thread_view.begin_edit(page.thread_view.rows[0].id)
    assert not page.composer.attach_button.isEnabled()  # an edit resends the message's own images
    with qtbot.waitSignal(page.reply_finished, timeout=10_000):
        assert page.replies.send("Name this cat")
    sent = last_request(h).messages[-1]
    assert sent.content == "Name this cat" and [i.data for i in sent.images] == [png((9, 9, 9))]
    assert page.thread_view.rows[0].image_count == 1


def test_the_attach_buttons_reason_is_the_models_own_for_an_mlx_model(tmp_path):
    from app.core.engines.base import ModelInfo
    from app.core.runtime.jobs import HostState
    from app.ui.chat.composer import vision_reason

    def mlx(**extra) -> HostState:
        return HostState(
            status="ready", model=ModelInfo(path=tmp_path / "VL-4bit", format="mlx", n_ctx=512, extra=extra)
        )

    why = "VL-4bit could see images with mlx-vlm, which is not installed (pip install mlx-vlm)"
    assert vision_reason(mlx(projector="", no_vision=why)) == why
    assert vision_reason(mlx(projector="mlx-vlm", no_vision="")) == ""

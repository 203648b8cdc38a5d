"""What an empty chat shows instead of a blank thread: the model it talks to, that replies stay on this
computer, and a few example prompts that fill the composer; with no model loaded, how to load one."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from app.ui.theme import set_status

EXAMPLE_PROMPTS = (
    "Explain how a heat pump works, in simple terms.",
    "Write a short, friendly email asking to move a meeting to Friday.",
    "Give me three ideas for a quick vegetarian dinner.",
)


class EmptyThread(QWidget):
    """`prompt_picked(text)` when an example is clicked (the page puts it in the composer)."""

    prompt_picked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("emptyThread")
        self.title = QLabel()
        self.title.setObjectName("cardTitle")
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.title.setWordWrap(True)
        self.line = QLabel()
        self.line.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.line.setWordWrap(True)
        set_status(self.line, "muted")
        self.examples: list[QPushButton] = []
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        layout.addWidget(self.title)
        layout.addWidget(self.line)
        layout.addSpacing(8)
        for text in EXAMPLE_PROMPTS:
            button = QPushButton(text)
            button.setToolTip("Put this in the message box, to send or change")
            button.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
            button.clicked.connect(lambda _checked=False, t=text: self.prompt_picked.emit(t))
            layout.addWidget(button, 0, Qt.AlignmentFlag.AlignHCenter)
            self.examples.append(button)
        layout.addStretch(2)
        self.show_model(None)

    def show_model(self, name: str | None, loading: bool = False, remote: bool = False) -> None:
        """`name`: the loaded model (None: none is); `loading`: one is being loaded; `remote`: it runs on
        a remote server (its replies do not stay here)."""
        if loading:
            self.title.setText("Loading the model…")
            self.line.setText("You can start typing once it is ready.")
        elif name is None:
            self.title.setText("No model loaded")
            self.line.setText(
                "Pick a model in the list above and press Load. No models yet? Find one on Discover, or add a "
                "file you already have on My Models."
            )
        else:
            self.title.setText(name)
            where = "It runs on a remote server you added." if remote else "Replies stay on this computer."
            self.line.setText(f"Ask anything. {where}")
        for button in self.examples:
            button.setVisible(name is not None and not loading)

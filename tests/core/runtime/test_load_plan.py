"""How many parallel slots a chat load plans for (runtime.load_plan.chat_load_slots)."""

from app.core.runtime.load_plan import chat_load_slots
from app.core.settings import AUTO_PARALLEL


def test_a_chat_load_plans_one_slot_unless_the_api_server_serves():
    assert chat_load_slots(4, serving=False) == 1  # one person chatting: one context of KV, not four
    assert chat_load_slots(4, serving=True) == 4  # the server's clients share the model: its setting
    assert chat_load_slots(0, serving=True) == AUTO_PARALLEL  # auto: the planner gives what memory allows
    assert chat_load_slots(0, serving=False) == 1

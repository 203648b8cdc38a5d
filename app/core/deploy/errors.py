"""What a plan request can get wrong; each message is shown to the user as it is."""

from app.core.errors import HearthError


class PlanError(HearthError):
    """A plan cannot be made from these inputs (unknown GPU, zero users, a context over the model's)."""

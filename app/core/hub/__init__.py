"""The Hugging Face Hub (or a mirror), reached only through `HubClient`: search, repo listings, model cards,
the variants a user chooses and their metadata read remotely, and the rules for what Hearth accepts by name."""

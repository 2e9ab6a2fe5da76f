"""The user's model declaration becomes a Triton model folder on disk."""

"""Setup step 2: the user's model declaration becomes a Triton model folder on disk."""

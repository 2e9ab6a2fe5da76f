"""The user-process side of the data path: receive batches from the proxy, run the callable, reply."""

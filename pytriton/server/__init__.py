"""Setup step 3: the tritonserver process: its configuration, command line, distribution and supervision."""

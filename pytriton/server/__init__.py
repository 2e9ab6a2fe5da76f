"""The tritonserver process: its configuration, command line, distribution and supervision."""

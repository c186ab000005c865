"""Built-in method plugins, one file each, loaded exactly like a user's ``--plugin`` file."""

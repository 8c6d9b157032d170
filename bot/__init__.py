"""The bot: talks to git remotes and GitHub, and runs the engine's main job on a clone."""

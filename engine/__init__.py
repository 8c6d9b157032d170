"""PyTPU's engine: every stage that works on a local checkout, from the knowledge base to the
rewritten files and their report. Nothing here talks to git remotes or GitHub."""

"""The migration report: a JSON document and the Markdown a reviewer reads, from Jinja templates."""

"""The KB-driven rewriter: the knowledge base loaded and indexed, each file analysed and
transformed in one libcst pass, the findings and the comments it leaves for reviewers."""

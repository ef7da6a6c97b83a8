"""fastpath's policy rules: pure functions over Kubernetes objects, run by the CrossGuard pack (__main__.py)
and by the offline linter (tools/lint.py)."""

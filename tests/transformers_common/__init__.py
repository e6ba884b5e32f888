"""transformers' own common model tests for ours: where they come from (``fetch.py``) and the files their source
distribution lacks (``stand_ins.py``); ``tests/test_transformers_common.py`` runs them."""

"""Record folders of the Parameter Golf challenge and the tools that build and check them.

The tools live in ``records/golf/``; ``records/submission.py`` is their command line. None of
this is part of the counted ``train_gpt.py``.
"""

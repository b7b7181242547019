"""The built-in ``python_source`` corpus (``data.python_source``): which files, the split by file, the blocks."""

import numpy as np
import pytest

from cbs_ray.data.python_source import (
    DOCUMENT_END,
    EVAL_SHARE_OF_256,
    corpus_blocks,
    held_out,
    python_source_corpus,
    stdlib_sources,
)
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import spec_from_dict


def _tree(root):
    for relative, text in {"a.py": "x = 1\n", "pkg/b.py": "y = 2\n", "pkg/test/t.py": "assert 0\n",
                           "tests/u.py": "assert 0\n", "site-packages/v.py": "import v\n", "notes.txt": "no\n",
                           "idlelib/idle_test/w.py": "pass\n"}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_sources_are_the_py_files_outside_tests_and_site_packages_in_path_order(tmp_path):
    _tree(tmp_path)
    (tmp_path / "link.py").symlink_to(tmp_path / "a.py")
    assert [relative for relative, _ in stdlib_sources(tmp_path)] == ["a.py", "pkg/b.py"]


def test_the_split_depends_on_the_path_alone_and_holds_out_about_one_file_in_twenty():
    paths = [f"pkg{i}/module{i}.py" for i in range(4000)]
    share = sum(map(held_out, paths)) / len(paths)
    assert abs(share - EVAL_SHARE_OF_256 / 256) < 0.015  # 5.1 % expected; 4000 paths: sd 0.35 %
    assert [held_out(p) for p in paths[:50]] == [held_out(p) for p in paths[:50]]


def test_documents_are_laid_end_to_end_with_an_end_byte_and_the_partial_block_dropped():
    blocks = corpus_blocks([b"ab", b"cde"], block_length=3)
    # the stream a b END c d e END: two full blocks of 3, the last END dropped
    assert blocks.tolist() == [[97, 98, DOCUMENT_END], [99, 100, 101]]
    assert blocks.dtype == np.int64


def test_the_corpus_puts_each_file_on_one_side(tmp_path, monkeypatch):
    _tree(tmp_path)
    monkeypatch.setattr("cbs_ray.data.python_source.held_out", lambda relative: relative == "pkg/b.py")
    corpus = python_source_corpus(2, root=tmp_path)
    assert (corpus.train_files, corpus.eval_files) == (1, 1)
    assert bytes(corpus.train.ravel().astype(np.uint8)) == b"x = 1\n"  # 7 bytes with the end: 3 blocks of 2
    assert bytes(corpus.evaluation.ravel().astype(np.uint8)) == b"y = 2\n"


def test_the_running_interpreter_s_standard_library_is_a_corpus_of_millions_of_tokens():
    corpus = python_source_corpus(64)
    assert corpus.train.shape[1] == 64 and corpus.train.size > 2_000_000 and len(corpus.evaluation) > 500
    assert 0 <= corpus.train.min() and corpus.train.max() < 256


def test_python_source_is_a_causal_lm_s_corpus():
    with pytest.raises(SpecError, match="python_source is a corpus for a causal LM"):
        spec_from_dict({"task": "sequence-classification", "data": {"builtin_task": "python_source"}})

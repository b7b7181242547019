"""Issue 40 row 1: a nearly full disk under storage_path is refused before Ray, and a search whose disk fills
while it runs stops as Ctrl-C does while Tune can still save its state (the watch, on a hand-made free space)."""

import signal

import pytest

from cbs_ray.records.storage import ReportError
from cbs_ray.spec.errors import SpecError
from cbs_ray.tune import disk_watch
from cbs_ray.tune.disk_watch import MIN_FREE_BYTES, DiskWatch, check_free_space, free_bytes, storage_low_message


@pytest.mark.parametrize("free, refused", [(3 * 2 ** 20, True), (MIN_FREE_BYTES - 1, True), (MIN_FREE_BYTES, False),
                                           (None, False)])
def test_a_nearly_full_storage_is_refused_before_ray(free, refused):
    if refused:
        with pytest.raises(SpecError, match=r"^storage_path: /data/ray has [\d.]+ MB free, under the 64.0 MB"):
            check_free_space("/data/ray", free=lambda path: free)
    else:
        check_free_space("/data/ray", free=lambda path: free)


def test_free_bytes_of_a_folder_not_made_yet_and_of_a_uri(tmp_path):
    assert free_bytes(str(tmp_path / "not" / "yet")) > 0
    assert free_bytes("s3://bucket/ray") is None


def test_the_watch_stops_the_search_once_and_says_where(monkeypatch):
    signals = []
    monkeypatch.setattr(disk_watch.os, "kill", lambda pid, sig: signals.append(sig))
    monkeypatch.setattr(disk_watch, "stopped_for", {})
    free = {"now": 10 * MIN_FREE_BYTES}
    monkeypatch.setattr(disk_watch, "free_bytes", lambda path: free["now"])
    watch = DiskWatch("/data/ray", every_s=0.0)
    watch.on_step_begin(0, [])
    assert signals == []
    free["now"] = MIN_FREE_BYTES // 2
    watch.on_step_begin(1, [])
    watch.on_step_begin(2, [])
    assert signals == [signal.SIGINT]  # once: Tune's own graceful stop
    message = storage_low_message("/data/ray/my exp")
    assert message.startswith("storage_path: /data/ray had 32.0 MB free") and len(message.splitlines()) == 1
    assert message.endswith("cbs-ray search --resume '/data/ray/my exp'")
    assert issubclass(disk_watch.StorageLow, ReportError)  # the command line's one line


@pytest.mark.parametrize("mode, owner_is_other, refused", [
    (0o777, True, True),     # another user's folder anyone can write into: its pickles are not ours
    (0o775, True, True),
    (0o1777, True, False),   # sticky, like /tmp: others cannot replace what we write
    (0o755, True, False),
    (0o777, False, False),   # our own
])
def test_a_storage_folder_others_can_write_into_is_refused(mode, owner_is_other, refused, tmp_path):
    import os

    from cbs_ray.tune.prepare import check_own_storage

    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    if owner_is_other:
        if os.geteuid() != 0:
            pytest.skip("needs root to give a folder to another user")
        os.chown(folder, 65534, 65534)
    if refused:
        with pytest.raises(SpecError, match="belongs to another user and others can write there"):
            check_own_storage(folder / "ray_results")
    else:
        check_own_storage(folder / "ray_results")

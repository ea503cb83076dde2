"""The download cap (env.download_max_mb), enforced while the bytes arrive rather than when the page is next
observed: a download over the cap is cancelled, and Chromium deletes what it had written.

The env hears of downloads over its own DevTools connection (devtools.py; chromedriver exposes no events).
Downloads are allowed into the env's folder with events on: `Browser.downloadWillBegin` names each download, and
`Browser.downloadProgress` says how far it got. A download whose announced size (Content-Length) is over the cap
is cancelled at its first progress event, before the body reaches the cap unless a loaded machine delays that
event (once, on 2 busy cores, past 1 MB at 13 MB/s). Without one, the progress events come only
every 500 ms, time for a fast server to write hundreds of MB, so while a download is in progress a sampler reads
the sizes of the partial files (`*.crdownload`) every SAMPLE_S and cancels (`Browser.cancelDownload`) the
download behind one over the cap. What lands in the folder beyond the cap is what arrives between two samples
and during the cancellation, about 20 ms of the download on a busy 2-core machine: with a 1 MB cap the folder
peaked at 1.05-1.18 MB for a server sending 13 MB/s, and at 1.2-3.8 MB for one sending as fast as loopback and
the confinement proxy go (50 MB in 0.3-0.5 s). A download that completes between two samples is over the cap
only as a whole file, which the env's observation removes.
"""

from __future__ import annotations

import threading
from pathlib import Path

from rlsys.envs.web.devtools import DevTools, DevToolsError

SAMPLE_S = 0.01
PARTIAL = ".crdownload"


class DownloadCap:
    """Downloads into `folder` with the cap enforced (see the module's docstring), over the browser's DevTools
    connection. `report()` lists what changed in the folder since the last call and the downloads cancelled
    meanwhile."""

    def __init__(self, devtools: DevTools, folder: Path, cap_mb: float):
        self.folder = folder
        self.cap_mb = cap_mb
        self._cap = cap_mb * 1e6
        self._devtools = devtools
        # The reader thread takes only _state, briefly: it must stay free to deliver the replies that a
        # cancellation waits for. _folder is held from a cancellation to the removal of its file, and by report().
        self._state = threading.Lock()
        self._folder = threading.Lock()
        self._active: dict[str, dict] = {}  # guid -> {"name", "received"}
        self._over: set[str] = set()  # guids an event found over the cap
        self._cancelled: list[dict] = []  # entries for the next report
        self._busy = threading.Event()  # a download is in progress: sample
        self._stopped = threading.Event()
        for method in ("Browser.downloadWillBegin", "Browser.downloadProgress"):
            devtools.on(method, lambda params, _session, method=method: self._on_download(method, params))
        devtools.call("Browser.setDownloadBehavior", behavior="allow", downloadPath=str(folder), eventsEnabled=True)
        threading.Thread(target=self._sample, name="rlsys-download-cap", daemon=True).start()

    def _on_download(self, method: str, params: dict) -> None:
        guid = params["guid"]
        with self._state:
            if method == "Browser.downloadWillBegin":
                self._active[guid] = {"name": params.get("suggestedFilename") or "", "received": 0}
            elif guid in self._active and params["state"] != "inProgress":
                del self._active[guid]
                self._over.discard(guid)
            elif guid in self._active:
                self._active[guid]["received"] = params["receivedBytes"]
                if max(params["receivedBytes"], params["totalBytes"]) > self._cap:  # the total: Content-Length
                    self._over.add(guid)
            if self._active:
                self._busy.set()
            else:
                self._busy.clear()

    def _sample(self) -> None:
        while self._busy.wait() and not (self._stopped.is_set() or self._devtools.closed.is_set()):
            over = {}
            for path in self.folder.glob("*" + PARTIAL):
                try:
                    if (size := path.stat().st_size) > self._cap:
                        over[path] = size
                except FileNotFoundError:
                    continue
            if over or self._over:
                with self._folder:
                    self._cancel(over)
            self._stopped.wait(SAMPLE_S)

    def _cancel(self, over: dict[Path, int], everything: bool = False) -> None:
        """Cancel the downloads an event found over the cap, those writing the partial files in `over` (every
        download in progress where a file's name matches none), or with `everything` all in progress."""
        with self._state:
            guids = set(self._active) if everything else set(self._over)
            for path in over:
                guids |= {g for g, d in self._active.items() if _writes(d["name"], path.name)} or set(self._active)
            cancelling = {guid: self._active.pop(guid) for guid in guids if guid in self._active}
            self._over -= guids
            going_on = [d["name"] for d in self._active.values()]
            if not self._active:
                self._busy.clear()
        for guid, download in cancelling.items():
            try:
                self._devtools.call("Browser.cancelDownload", guid=guid)
            except (DevToolsError, OSError):  # TimeoutError is an OSError
                continue  # it finished meanwhile, or the browser is gone
            # its partial file, unless a download going on may be writing that one: Chromium deletes it soon
            # after, and until then the report would list it
            files = {
                p: over.get(p) or _size(p)
                for p in self.folder.glob("*" + PARTIAL)
                if _writes(download["name"], p.name) and not any(_writes(name, p.name) for name in going_on)
            } or over
            for path in files:
                path.unlink(missing_ok=True)
            self._cancelled.append(
                {
                    "name": download["name"],
                    "bytes": max([download["received"], *files.values()]),
                    "complete": False,
                    "removed": f"cancelled while arriving: over the {self.cap_mb:g} MB cap",
                }
            )

    def report(self, seen: dict[str, int]) -> list[dict]:
        """The downloads cancelled since the last report, then every file in the folder that is new or has
        changed size since `seen` (which is updated): {"name", "bytes", "complete"}, and "removed" for one over
        the cap, which is deleted (a download that finished between two samples). A download cancelled as it
        finished is one entry: the cancellation's, with what the finished file says."""
        with self._folder:
            entries, self._cancelled = self._cancelled, []
            cancelled = {entry["name"]: entry for entry in entries}
            for path in _files(self.folder):
                try:
                    size = path.stat().st_size
                except FileNotFoundError:
                    continue
                if seen.get(path.name) == size:
                    continue
                seen[path.name] = size
                entry = {"name": path.name, "bytes": size, "complete": not path.name.endswith(PARTIAL)}
                if size > self._cap:
                    path.unlink(missing_ok=True)
                    entry["removed"] = f"over the {self.cap_mb:g} MB cap"
                if entry["complete"] and path.name in cancelled:  # the cancellation came as it finished
                    cancelled[path.name].update(entry)
                else:
                    entries.append(entry)
        return entries

    def clear(self) -> None:
        """Cancel every download in progress (it would go on writing into the next episode), empty the folder
        and forget the cancellations not reported yet: between episodes."""
        with self._folder:
            self._cancel({}, everything=True)
            self._cancelled = []
            for path in _files(self.folder):
                path.unlink(missing_ok=True)

    def close(self) -> None:
        self._stopped.set()
        self._busy.set()  # the sampler sees it


def _files(folder: Path) -> list[Path]:
    """The folder's files, sorted; none where the folder is gone with its browser."""
    try:
        return sorted(folder.iterdir())
    except FileNotFoundError:
        return []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _writes(name: str, partial: str) -> bool:
    """Whether Chromium may be writing the download suggested as `name` into the file `partial`: `name`, or the
    name it makes unique (`report (1).pdf`), with PARTIAL after it."""
    if not name or not partial.endswith(PARTIAL):
        return False
    written = partial.removesuffix(PARTIAL)
    if written == name:
        return True
    stem, dot, extension = name.rpartition(".") if "." in name else (name, "", "")
    head, _, tail = written.partition(" (")
    number, _, rest = tail.partition(")")
    return head == stem and number.isdigit() and rest == dot + extension

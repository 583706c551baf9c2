"""Layer 4, the processes: the parent of ``workerpool run`` and the fork of each child.

The supervisor and its slots (:mod:`.supervisor`, :mod:`.slots`), the seam over system calls
(:mod:`.oslayer`), a child's fork bootstrap (:mod:`.child`), the releaser forked at exit
(:mod:`.releaser`), heartbeat files and the probe that reads them (:mod:`.heartbeat`,
:mod:`.healthcheck`), and the settings of ``workerpool run`` (:mod:`.settings`). What a child
runs is handed in as a factory: this layer never imports the runtime, and opens no database
connection.

Imports: the standard library and :mod:`workerpool.model` only (the probe must stay cheap).
"""

"""Framework integrations, the outermost layer: each sub-package adapts one framework's API to
the client (:class:`~workerpool.client.WorkerPool`) and is imported only by that framework's
users. ``workerpool.contrib.django``: a Django Tasks backend and a read-only admin page."""

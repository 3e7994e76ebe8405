"""The door: the operations every entry uses to make or act on a run, over one bundle of
stores per process (``Stores``) and a ``Send``. See ``reactq.shared.service.door``."""

from reactq.shared.service.door import Created, Door, Origin, OriginKind, check_interrupt
from reactq.shared.service.send import Send, celery_send
from reactq.shared.stores.bundle import Stores

__all__ = ["Created", "Door", "Origin", "OriginKind", "Send", "Stores", "celery_send", "check_interrupt"]

"""Flask + SQLAlchemy ORM + workerpool: ``enqueue(conn=session.connection())``.

The request's ORM ``Session`` and the job share one transaction: ``session.connection()`` is the
Connection the session flushes on, so ``session.commit()`` commits the invoice and its job
together and ``session.rollback()`` drops both. The handler runs in `workerpool run`:

    export WORKERPOOL_DATABASE_URL=postgresql://app@db/app
    workerpool migrate
    workerpool run examples.flask_app:pool &
    flask --app examples.flask_app run
"""

from __future__ import annotations

from typing import Any

from flask import Flask, abort, g, request
from sqlalchemy import create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from workerpool import Job, WorkerPool

pool = WorkerPool()  # $WORKERPOOL_DATABASE_URL, read on first use
pool.queue("billing", concurrency=2, poll_interval=0.2)


class Base(DeclarativeBase):
    pass


class Invoice(Base):
    __tablename__ = "invoices"
    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str]
    sent: Mapped[bool] = mapped_column(default=False)


@pool.task(queue="billing")
def send_invoice(job: Job) -> None:
    """Stands in for e-mailing the invoice: marks it sent."""
    with Session(pool.engine) as session, session.begin():
        invoice = session.get(Invoice, job.payload["invoice_id"])
        if invoice is not None:
            invoice.sent = True


def create_app() -> Flask:
    app = Flask(__name__)
    engine = create_engine(pool.url)  # the app's own engine; the pool has one of its own
    Base.metadata.create_all(engine)  # a real app migrates its tables (Alembic)
    sessions = sessionmaker(engine)
    app.extensions["engine"] = engine  # dispose it at shutdown

    @app.before_request
    def open_session() -> None:
        g.session = sessions()

    @app.teardown_request
    def close_session(exc: BaseException | None) -> None:
        g.session.close()  # rolls back whatever was not committed

    @app.post("/invoices")
    def create_invoice() -> tuple[dict[str, Any], int]:
        session: Session = g.session
        invoice = Invoice(customer=request.get_json()["customer"])
        session.add(invoice)
        session.flush()  # the row (and its id) in the session's transaction
        job_id = pool.enqueue("send_invoice", {"invoice_id": invoice.id}, conn=session.connection())
        if invoice.customer.endswith(".invalid"):
            session.rollback()  # a check that fails after the enqueue: both are dropped
            abort(422)
        session.commit()  # the invoice and its job, together
        return {"id": invoice.id, "job_id": job_id}, 201

    return app

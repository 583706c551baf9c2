"""FastAPI + workerpool: a signup row and its welcome job, committed together or not at all.

The application owns an ``AsyncEngine`` (created and disposed by the lifespan); an endpoint
writes its row and enqueues on the same ``AsyncConnection``, so the job exists iff the signup
commits. The handler runs in `workerpool run` beside the web server:

    export WORKERPOOL_DATABASE_URL=postgresql://app@db/app
    workerpool migrate
    workerpool run examples.fastapi_app:pool &
    uvicorn examples.fastapi_app:app

Needs ``pip install 'workerpool[asyncio]' fastapi`` (and uvicorn to serve it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel
from sqlalchemy import Boolean, Column, Integer, MetaData, Table, Text, insert, update
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from workerpool import Job, WorkerPool

pool = WorkerPool()  # $WORKERPOOL_DATABASE_URL, read on first use
pool.queue("email", concurrency=4, poll_interval=0.2)

metadata = MetaData()
signups = Table(
    "signups",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("email", Text, nullable=False, unique=True),
    Column("welcomed", Boolean, nullable=False, server_default="false"),
)


@pool.task(queue="email")
def send_welcome(job: Job) -> None:
    """Stands in for sending the e-mail: marks the signup as welcomed."""
    with pool.engine.begin() as conn:
        conn.execute(
            update(signups).where(signups.c.id == job.payload["signup_id"]).values(welcomed=True)
        )


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # the app's own engine, psycopg async; pre-pinged: a PostgreSQL restart costs no request
    engine = create_async_engine(pool.url, pool_size=5, pool_pre_ping=True)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)  # a real app migrates its tables (Alembic)
    app.state.engine = engine
    yield
    await engine.dispose()
    await pool.dispose_async()


app = FastAPI(lifespan=lifespan)


class Signup(BaseModel):
    email: str


@app.post("/signups", status_code=201)
async def create_signup(body: Signup, request: Request) -> dict[str, int]:
    async with request.app.state.engine.begin() as conn:  # one transaction: row and job
        signup_id = await _insert_signup(conn, body.email)
        job_id = await pool.enqueue_async("send_welcome", {"signup_id": signup_id}, conn=conn)
        if body.email.endswith(".invalid"):
            # A check that fails after the enqueue (a declined payment, say): raising inside
            # the block rolls back the row and the job together; no worker ever sees it.
            raise HTTPException(422, "this address cannot receive mail")
    return {"id": signup_id, "job_id": job_id}


async def _insert_signup(conn: AsyncConnection, email: str) -> int:
    result = await conn.execute(insert(signups).values(email=email).returning(signups.c.id))
    return result.scalar_one()

"""The job store's schema, as scripts per version and per dialect.

`app.store.migrations` applies them in order. SQLite databases exist from version 1 on,
so SQLite has a script for every version. PostgreSQL came with version 6, so its history
starts with one script that builds version 6 whole; from version 7 on, every version
has a script for each. Version N means the same tables and columns on both (a test
compares them). Add a version to change the schema; never edit one that has shipped.

Types on PostgreSQL: times are `double precision` (its `real` is float4: epoch seconds
rounded to 128 s), SQLite's rowid keys are identity columns, BLOB is bytea, sizes bigint.
"""

from __future__ import annotations

SQLITE_1 = """
CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,             -- JobSpec JSON as validated
    workload TEXT NOT NULL,
    path TEXT NOT NULL,
    requirements TEXT NOT NULL,     -- Requirements JSON (see app.dispatch)
    status TEXT NOT NULL,
    reason TEXT,
    stderr_tail TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    queued_at REAL NOT NULL,        -- when it last entered the queue
    lease_owner TEXT,
    lease_deadline REAL,
    worker_id TEXT,                 -- the last worker that held it
    client TEXT
);
CREATE INDEX jobs_status ON jobs (status, created_at);
CREATE INDEX jobs_created ON jobs (created_at);
CREATE TABLE job_events (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    status TEXT NOT NULL,
    at REAL NOT NULL,
    detail TEXT
);
CREATE INDEX job_events_job ON job_events (job_id, id);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    worker_id TEXT,
    result TEXT NOT NULL,           -- RunResult JSON, artifacts capped for inline use
    truncated TEXT NOT NULL,        -- JSON list of artifact names cut for inline use
    valid INTEGER NOT NULL,
    trace_s REAL,
    lower_s REAL,
    compile_s REAL,
    run_s REAL,                     -- the runner's wall time for the whole job
    created_at REAL NOT NULL
);
CREATE INDEX runs_job ON runs (job_id);
CREATE TABLE artifacts (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    text TEXT NOT NULL,             -- full text up to ARTIFACT_MAX_BYTES
    truncated INTEGER NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE workers (
    id TEXT PRIMARY KEY,
    name TEXT,
    capabilities TEXT NOT NULL,
    registered_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL,
    current_job TEXT
);
"""
"""Jobs, their state changes, runs, full artifact text and workers."""

SQLITE_2 = """
CREATE TABLE files (
    sha256 TEXT PRIMARY KEY,
    data BLOB NOT NULL,
    media_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE job_files (
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    sha256 TEXT NOT NULL REFERENCES files (sha256),
    PRIMARY KEY (job_id, name)
);
CREATE INDEX job_files_sha ON job_files (sha256);
"""
"""Binary files (exported functions, profiler traces, input archives), stored once by
content hash and attached to jobs by name."""

SQLITE_3 = """
CREATE TABLE matrices (
    id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,             -- MatrixSpec JSON as validated
    created_at REAL NOT NULL
);
CREATE INDEX matrices_created ON matrices (created_at);
CREATE TABLE matrix_cells (
    matrix_id TEXT NOT NULL REFERENCES matrices (id) ON DELETE CASCADE,
    row INTEGER NOT NULL,
    col INTEGER NOT NULL,
    job_id TEXT REFERENCES jobs (id),
    reason TEXT,                    -- why the cell has no job
    PRIMARY KEY (matrix_id, row, col)
);
"""
"""Workload matrices: one submission expanded over rows (shapes or parameter values)
and columns (paths); each cell holds its job, or the reason it has none."""

SQLITE_4 = """
ALTER TABLE jobs ADD COLUMN lease_id TEXT;
CREATE INDEX jobs_client ON jobs (client, status);
ALTER TABLE files ADD COLUMN used_at REAL;
UPDATE files SET used_at = created_at;
CREATE INDEX runs_created ON runs (created_at);
"""
"""Leases carry a random id that every report must present; jobs are counted per
client at admission; files remember when a job last used them (for retention)."""

SQLITE_5 = """
CREATE TABLE file_blobs (
    id INTEGER PRIMARY KEY,
    started_at REAL NOT NULL        -- when its writing started
);
CREATE TABLE file_chunks (
    blob INTEGER NOT NULL REFERENCES file_blobs (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    data BLOB NOT NULL,             -- 1 MiB (app.store.files.CHUNK_BYTES), the last one fewer
    PRIMARY KEY (blob, seq)
);
ALTER TABLE files ADD COLUMN blob INTEGER REFERENCES file_blobs (id);
INSERT INTO file_blobs (id, started_at) SELECT rowid, created_at FROM files;
UPDATE files SET blob = rowid;
WITH RECURSIVE parts (blob, seq) AS (
    SELECT blob, 0 FROM files
    UNION ALL
    SELECT p.blob, p.seq + 1 FROM parts p JOIN files f ON f.blob = p.blob
    WHERE (p.seq + 1) * 1048576 < length(f.data)
)
INSERT INTO file_chunks (blob, seq, data)
SELECT p.blob, p.seq, coalesce(substr(f.data, p.seq * 1048576 + 1, 1048576), x'')
FROM parts p JOIN files f ON f.blob = p.blob;
ALTER TABLE files DROP COLUMN data;
"""
"""Files kept in chunks of 1 MiB (app.store.files), so that neither storing a file nor
reading it back holds it whole in memory; existing files are cut up. A blob is one
stored or half-written file."""

SQLITE_6 = """
ALTER TABLE jobs ADD COLUMN leased_at REAL;     -- when the current lease began
ALTER TABLE workers ADD COLUMN key_hash TEXT;   -- SHA-256 of the key its registration got
ALTER TABLE workers ADD COLUMN polling_until REAL;  -- while it waits in a lease request
CREATE INDEX workers_seen ON workers (last_heartbeat);
CREATE TABLE rate_hits (
    client TEXT NOT NULL,
    at REAL NOT NULL,
    n INTEGER NOT NULL              -- jobs (or uploads) counted at `at`
);
CREATE INDEX rate_hits_client ON rate_hits (client, at);
CREATE TABLE reaper (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    last_reap_at REAL               -- when any server last reaped
);
INSERT INTO reaper (id) VALUES (1);
"""
"""What several servers on one database need: when a lease began and worker keys (on
the database's clock and in the database, not in one server's memory), submissions
counted per client, and when any server last reaped (to tell an outage of every server
from a dead worker)."""

POSTGRES_6 = """
CREATE TABLE jobs (
    id text PRIMARY KEY,
    spec text NOT NULL,
    workload text NOT NULL,
    path text NOT NULL,
    requirements text NOT NULL,
    status text NOT NULL,
    reason text,
    stderr_tail text,
    attempts integer NOT NULL DEFAULT 0,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    queued_at double precision NOT NULL,
    lease_owner text,
    lease_deadline double precision,
    worker_id text,
    client text,
    lease_id text,
    leased_at double precision
);
CREATE INDEX jobs_status ON jobs (status, created_at);
CREATE INDEX jobs_created ON jobs (created_at);
CREATE INDEX jobs_client ON jobs (client, status);
CREATE TABLE job_events (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    job_id text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    status text NOT NULL,
    at double precision NOT NULL,
    detail text
);
CREATE INDEX job_events_job ON job_events (job_id, id);
CREATE TABLE runs (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    job_id text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt integer NOT NULL,
    worker_id text,
    result text NOT NULL,
    truncated text NOT NULL,
    valid integer NOT NULL,
    trace_s double precision,
    lower_s double precision,
    compile_s double precision,
    run_s double precision,
    created_at double precision NOT NULL
);
CREATE INDEX runs_job ON runs (job_id);
CREATE INDEX runs_created ON runs (created_at);
CREATE TABLE artifacts (
    run_id bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name text NOT NULL,
    text text NOT NULL,
    truncated integer NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE workers (
    id text PRIMARY KEY,
    name text,
    capabilities text NOT NULL,
    registered_at double precision NOT NULL,
    last_heartbeat double precision NOT NULL,
    current_job text,
    key_hash text,
    polling_until double precision
);
CREATE INDEX workers_seen ON workers (last_heartbeat);
CREATE TABLE file_blobs (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    started_at double precision NOT NULL
);
CREATE TABLE files (
    sha256 text PRIMARY KEY,
    media_type text NOT NULL,
    size bigint NOT NULL,
    created_at double precision NOT NULL,
    used_at double precision,
    blob bigint REFERENCES file_blobs (id)
);
CREATE TABLE file_chunks (
    blob bigint NOT NULL REFERENCES file_blobs (id) ON DELETE CASCADE,
    seq integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (blob, seq)
);
CREATE TABLE job_files (
    job_id text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    name text NOT NULL,
    sha256 text NOT NULL REFERENCES files (sha256),
    PRIMARY KEY (job_id, name)
);
CREATE INDEX job_files_sha ON job_files (sha256);
CREATE TABLE matrices (
    id text PRIMARY KEY,
    spec text NOT NULL,
    created_at double precision NOT NULL
);
CREATE INDEX matrices_created ON matrices (created_at);
CREATE TABLE matrix_cells (
    matrix_id text NOT NULL REFERENCES matrices (id) ON DELETE CASCADE,
    row integer NOT NULL,
    col integer NOT NULL,
    job_id text REFERENCES jobs (id),
    reason text,
    PRIMARY KEY (matrix_id, row, col)
);
CREATE TABLE rate_hits (
    client text NOT NULL,
    at double precision NOT NULL,
    n integer NOT NULL
);
CREATE INDEX rate_hits_client ON rate_hits (client, at);
CREATE TABLE reaper (
    id integer PRIMARY KEY CHECK (id = 1),
    last_reap_at double precision
);
INSERT INTO reaper (id) VALUES (1);
"""
"""PostgreSQL's version 6 whole: SQLITE_1 to SQLITE_6 in its types."""

SQLITE_7 = """
CREATE TABLE fits (
    id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,             -- FitSpec JSON as validated
    client TEXT,                    -- whose admission counts its probes
    status TEXT NOT NULL,           -- running, done, failed, cancelled
    reason TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX fits_created ON fits (created_at);
CREATE INDEX fits_status ON fits (status);
CREATE TABLE fit_probes (
    fit_id TEXT NOT NULL REFERENCES fits (id) ON DELETE CASCADE,
    target TEXT NOT NULL,
    value INTEGER NOT NULL,
    seq INTEGER NOT NULL,           -- the order the probes were planned in, per search
    job_id TEXT,                    -- its compile's job, kept when retention prunes the job
    fits INTEGER,                   -- the verdict, 1 or 0, NULL until the job ends with one
    peak_bytes INTEGER,
    refused TEXT,                   -- the compiler's refusal (libtpu's, over HBM)
    failed TEXT,                    -- why the probe gave no verdict
    PRIMARY KEY (fit_id, target, value)
);
CREATE INDEX fit_probes_job ON fit_probes (job_id);
"""
"""Fit searches: the largest value of one integer whose compile fits each target; each
probe is a compile-only job, and keeps its verdict and peak once that job ends."""

POSTGRES_7 = """
CREATE TABLE fits (
    id text PRIMARY KEY,
    spec text NOT NULL,
    client text,
    status text NOT NULL,
    reason text,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL
);
CREATE INDEX fits_created ON fits (created_at);
CREATE INDEX fits_status ON fits (status);
CREATE TABLE fit_probes (
    fit_id text NOT NULL REFERENCES fits (id) ON DELETE CASCADE,
    target text NOT NULL,
    value bigint NOT NULL,
    seq integer NOT NULL,
    job_id text,
    fits integer,
    peak_bytes bigint,
    refused text,
    failed text,
    PRIMARY KEY (fit_id, target, value)
);
CREATE INDEX fit_probes_job ON fit_probes (job_id);
"""
"""SQLITE_7 in PostgreSQL's types."""

SQLITE_8 = """
UPDATE jobs SET client = '' WHERE client IS NULL;
CREATE INDEX jobs_client_leased ON jobs (client, leased_at);
"""
"""Leasing takes turns between clients: the client served longest ago goes first, found
from each client's latest lease through this index. A job from before clients were
recorded counts as the client ''; every job has one from now on."""

POSTGRES_8 = SQLITE_8
"""SQLITE_8 as it is: an index reads alike on both."""

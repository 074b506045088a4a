SET ANSI_NULLS ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET QUOTED_IDENTIFIER ON;
SET NUMERIC_ROUNDABORT OFF;

IF OBJECT_ID(N'[dbo].[outbox]', N'U') IS NULL
BEGIN
    CREATE TABLE [dbo].[outbox] (
        id binary(16) NOT NULL,
        message_uuid nvarchar(max) NOT NULL CONSTRAINT [outbox_df_message_uuid] DEFAULT N'',
        lane int NULL,
        ordering_key nvarchar(max) NULL,
        transport nvarchar(max) NOT NULL CONSTRAINT [outbox_df_transport] DEFAULT N'',
        destination nvarchar(max) NOT NULL,
        message_type nvarchar(max) NULL,
        headers varbinary(max) NOT NULL,
        body varbinary(max) NOT NULL,
        tenant_id nvarchar(max) NULL,
        created_at datetimeoffset(7) NOT NULL,
        deliver_at datetimeoffset(7) NOT NULL,
        attempts int NOT NULL CONSTRAINT [outbox_df_attempts] DEFAULT 0,
        last_error nvarchar(max) NULL,
        status varchar(16) NOT NULL CONSTRAINT [outbox_df_status] DEFAULT 'pending',
        claim_token binary(16) NULL,
        claim_expires_at datetimeoffset(7) NULL,
        seq bigint IDENTITY(1,1) NOT NULL,
        CONSTRAINT [outbox_pk] PRIMARY KEY CLUSTERED (id) WITH (ALLOW_PAGE_LOCKS = OFF),
        CONSTRAINT [outbox_ck_id] CHECK (id <> 0x00000000000000000000000000000000),
        CONSTRAINT [outbox_ck_lane] CHECK (lane >= 0),
        CONSTRAINT [outbox_ck_headers] CHECK (DATALENGTH(headers) >= 8),
        CONSTRAINT [outbox_ck_attempts] CHECK (attempts >= 0),
        CONSTRAINT [outbox_ck_status] CHECK (status IN ('pending', 'parked')),
        CONSTRAINT [outbox_ck_claim] CHECK ((claim_token IS NULL AND claim_expires_at IS NULL)
            OR (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL AND claim_token <> 0x00000000000000000000000000000000))
    );
    ALTER TABLE [dbo].[outbox] SET (LOCK_ESCALATION = DISABLE);
END;

IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'outbox_ix_pending' AND object_id = OBJECT_ID(N'[dbo].[outbox]'))
    CREATE INDEX [outbox_ix_pending] ON [dbo].[outbox] (lane, id) INCLUDE (deliver_at, claim_expires_at) WHERE status = 'pending' WITH (ALLOW_PAGE_LOCKS = OFF);

IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'outbox_ix_lane_seq' AND object_id = OBJECT_ID(N'[dbo].[outbox]'))
    CREATE INDEX [outbox_ix_lane_seq] ON [dbo].[outbox] (lane, seq) INCLUDE (deliver_at, claim_expires_at) WHERE status = 'pending' AND lane IS NOT NULL WITH (ALLOW_PAGE_LOCKS = OFF);

IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'outbox_ix_parked' AND object_id = OBJECT_ID(N'[dbo].[outbox]'))
    CREATE INDEX [outbox_ix_parked] ON [dbo].[outbox] (lane, id) INCLUDE (ordering_key) WHERE status = 'parked' WITH (ALLOW_PAGE_LOCKS = OFF);

IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'outbox_ix_claims' AND object_id = OBJECT_ID(N'[dbo].[outbox]'))
    CREATE INDEX [outbox_ix_claims] ON [dbo].[outbox] (claim_token) INCLUDE (claim_expires_at, lane) WHERE claim_token IS NOT NULL WITH (ALLOW_PAGE_LOCKS = OFF);

IF EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'outbox_pk' AND object_id = OBJECT_ID(N'[dbo].[outbox]') AND allow_page_locks = 1)
    ALTER INDEX [outbox_pk] ON [dbo].[outbox] SET (ALLOW_PAGE_LOCKS = OFF);

IF EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'outbox_ix_pending' AND object_id = OBJECT_ID(N'[dbo].[outbox]') AND allow_page_locks = 1)
    ALTER INDEX [outbox_ix_pending] ON [dbo].[outbox] SET (ALLOW_PAGE_LOCKS = OFF);

IF EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'outbox_ix_parked' AND object_id = OBJECT_ID(N'[dbo].[outbox]') AND allow_page_locks = 1)
    ALTER INDEX [outbox_ix_parked] ON [dbo].[outbox] SET (ALLOW_PAGE_LOCKS = OFF);

IF EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'outbox_ix_claims' AND object_id = OBJECT_ID(N'[dbo].[outbox]') AND allow_page_locks = 1)
    ALTER INDEX [outbox_ix_claims] ON [dbo].[outbox] SET (ALLOW_PAGE_LOCKS = OFF);

IF OBJECT_ID(N'[dbo].[outbox_lanes]', N'U') IS NULL
    CREATE TABLE [dbo].[outbox_lanes] (
        lane int NOT NULL,
        owner nvarchar(400) NOT NULL,
        token binary(16) NOT NULL,
        expires_at datetimeoffset(7) NOT NULL,
        CONSTRAINT [outbox_lanes_pk] PRIMARY KEY CLUSTERED (lane),
        CONSTRAINT [outbox_lanes_ck_lane] CHECK (lane >= 0),
        CONSTRAINT [outbox_lanes_ck_token] CHECK (token <> 0x00000000000000000000000000000000)
    );

IF OBJECT_ID(N'[dbo].[outbox_nodes]', N'U') IS NULL
    CREATE TABLE [dbo].[outbox_nodes] (
        owner nvarchar(400) COLLATE Latin1_General_100_BIN2 NOT NULL,
        expires_at datetimeoffset(7) NOT NULL,
        CONSTRAINT [outbox_nodes_pk] PRIMARY KEY CLUSTERED (owner)
    );

IF OBJECT_ID(N'[dbo].[inbox]', N'U') IS NULL
    CREATE TABLE [dbo].[inbox] (
        consumer varbinary(400) NOT NULL,
        message_uuid varbinary(400) NOT NULL,
        processed_at datetimeoffset(7) NOT NULL,
        duplicates bigint NOT NULL CONSTRAINT [inbox_df_duplicates] DEFAULT 0,
        CONSTRAINT [inbox_pk] PRIMARY KEY CLUSTERED (consumer, message_uuid)
    );

IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'inbox_ix_age' AND object_id = OBJECT_ID(N'[dbo].[inbox]'))
    CREATE INDEX [inbox_ix_age] ON [dbo].[inbox] (processed_at);

IF OBJECT_ID(N'[dbo].[inbox_lease]', N'U') IS NULL
    CREATE TABLE [dbo].[inbox_lease] (
        name varchar(64) NOT NULL,
        owner nvarchar(400) NOT NULL,
        token binary(16) NOT NULL,
        expires_at datetimeoffset(7) NOT NULL,
        CONSTRAINT [inbox_lease_pk] PRIMARY KEY CLUSTERED (name),
        CONSTRAINT [inbox_lease_ck_token] CHECK (token <> 0x00000000000000000000000000000000)
    );

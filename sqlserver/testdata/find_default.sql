-- FindIndexScript
IF COL_LENGTH(N'[dbo].[outbox]', N'message_uuid_key') IS NULL
    ALTER TABLE [dbo].[outbox] ADD [message_uuid_key] AS CAST(message_uuid AS nvarchar(400));

IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'outbox_uuid_ix' AND object_id = OBJECT_ID(N'[dbo].[outbox]'))
    CREATE INDEX [outbox_uuid_ix] ON [dbo].[outbox] ([message_uuid_key]);

-- uuid, index
SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq FROM [dbo].[outbox] AS o WHERE o.[message_uuid_key] = CAST(@uuid AS nvarchar(400)) AND CAST(o.message_uuid AS varbinary(max)) = CAST(@uuid AS varbinary(max)) AND DATALENGTH(o.message_uuid) = DATALENGTH(@uuid) ORDER BY o.id

-- uuid in a window, no index
SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq FROM [dbo].[outbox] AS o WHERE CAST(o.message_uuid AS varbinary(max)) = CAST(@uuid AS varbinary(max)) AND DATALENGTH(o.message_uuid) = DATALENGTH(@uuid) AND o.id >= CAST(@lo AS binary(16)) AND o.id < CAST(@hi AS binary(16)) ORDER BY o.id

-- ordering key
SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq FROM [dbo].[outbox] AS o WHERE o.status = 'pending' AND o.lane = @lane AND CAST(o.ordering_key AS varbinary(max)) = CAST(@key AS varbinary(max)) AND DATALENGTH(o.ordering_key) = DATALENGTH(@key) ORDER BY o.id

-- ordering key
SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq FROM [dbo].[outbox] AS o WHERE o.status = 'parked' AND o.lane = @lane AND CAST(o.ordering_key AS varbinary(max)) = CAST(@key AS varbinary(max)) AND DATALENGTH(o.ordering_key) = DATALENGTH(@key) ORDER BY o.id

-- topic since
SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq FROM [dbo].[outbox] AS o WHERE CAST(o.destination AS varbinary(max)) = CAST(@topic AS varbinary(max)) AND DATALENGTH(o.destination) = DATALENGTH(@topic) AND o.id >= CAST(@lo AS binary(16)) ORDER BY o.id

-- inbox entries of a UUID
WITH c AS (
    SELECT MIN(consumer) AS consumer FROM [dbo].[inbox]
    UNION ALL
    SELECT r.consumer FROM (
        SELECT i.consumer, ROW_NUMBER() OVER (ORDER BY i.consumer) AS rn FROM [dbo].[inbox] AS i JOIN c ON i.consumer > c.consumer
    ) AS r WHERE r.rn = 1
)
SELECT e.consumer, e.processed_at, e.duplicates FROM c JOIN [dbo].[inbox] AS e ON e.consumer = c.consumer AND e.message_uuid = @uuid ORDER BY e.consumer OPTION (MAXRECURSION 0)

-- locked rows: the lockable ones, then the present ones
SELECT o.id FROM [dbo].[outbox] AS o WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK) WHERE o.lane IS NULL AND o.id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)))
SELECT o.id FROM [dbo].[outbox] AS o WITH (NOLOCK) WHERE o.lane IS NULL AND o.id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)))

SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at FROM [dbo].[outbox] AS o WITH (READPAST, READCOMMITTEDLOCK) WHERE o.lane IS NULL AND o.id > CAST(@after AS binary(16)) AND o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) ORDER BY o.id

SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at FROM [dbo].[outbox] AS o WITH (READPAST, READCOMMITTEDLOCK) WHERE o.lane = @lane AND o.id > CAST(@after AS binary(16)) AND o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) ORDER BY o.id

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @claimed TABLE (id binary(16) NOT NULL PRIMARY KEY, message_uuid nvarchar(max), lane int, ordering_key nvarchar(max), transport nvarchar(max), destination nvarchar(max), message_type nvarchar(max), headers varbinary(max), body varbinary(max), tenant_id nvarchar(max), created_at datetimeoffset(7), deliver_at datetimeoffset(7), attempts int, last_error nvarchar(max), status varchar(16), claim_token binary(16), claim_expires_at datetimeoffset(7));
WITH c AS (SELECT TOP (@n) * FROM [dbo].[outbox] AS o WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK) WHERE o.lane IS NULL AND o.id > CAST(@after AS binary(16)) AND o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) ORDER BY o.id)
UPDATE c SET claim_token = CAST(@tok AS binary(16)), claim_expires_at = @until OUTPUT inserted.id, inserted.message_uuid, inserted.lane, inserted.ordering_key, inserted.transport, inserted.destination, inserted.message_type, inserted.headers, inserted.body, inserted.tenant_id, inserted.created_at, inserted.deliver_at, inserted.attempts, inserted.last_error, inserted.status, inserted.claim_token, inserted.claim_expires_at INTO @claimed;
SELECT id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at FROM @claimed ORDER BY id;

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET XACT_ABORT ON;
DECLARE @claimed TABLE (id binary(16) NOT NULL PRIMARY KEY, message_uuid nvarchar(max), lane int, ordering_key nvarchar(max), transport nvarchar(max), destination nvarchar(max), message_type nvarchar(max), headers varbinary(max), body varbinary(max), tenant_id nvarchar(max), created_at datetimeoffset(7), deliver_at datetimeoffset(7), attempts int, last_error nvarchar(max), status varchar(16), claim_token binary(16), claim_expires_at datetimeoffset(7));
DECLARE @live bit = 0;
BEGIN TRANSACTION;
SELECT @live = 1 FROM [dbo].[outbox_lanes] AS l WITH (UPDLOCK, HOLDLOCK) WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME();
WITH c AS (SELECT TOP (@n) * FROM [dbo].[outbox] AS o WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK) WHERE @live = 1 AND o.lane = @lane AND o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) AND o.id < ALL (SELECT h.id FROM (SELECT TOP (@n) b.id, b.deliver_at, b.claim_expires_at FROM [dbo].[outbox] AS b WITH (READCOMMITTEDLOCK) WHERE b.lane = @lane AND b.status = 'pending' ORDER BY b.id) AS h WHERE h.deliver_at > @now OR h.claim_expires_at > @now) ORDER BY o.id)
UPDATE c SET claim_token = CAST(@tok AS binary(16)), claim_expires_at = @until OUTPUT inserted.id, inserted.message_uuid, inserted.lane, inserted.ordering_key, inserted.transport, inserted.destination, inserted.message_type, inserted.headers, inserted.body, inserted.tenant_id, inserted.created_at, inserted.deliver_at, inserted.attempts, inserted.last_error, inserted.status, inserted.claim_token, inserted.claim_expires_at INTO @claimed;
COMMIT TRANSACTION;
SELECT id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at FROM @claimed ORDER BY id;

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET XACT_ABORT ON;
DECLARE @claimed TABLE (id binary(16) NOT NULL PRIMARY KEY, message_uuid nvarchar(max), lane int, ordering_key nvarchar(max), transport nvarchar(max), destination nvarchar(max), message_type nvarchar(max), headers varbinary(max), body varbinary(max), tenant_id nvarchar(max), created_at datetimeoffset(7), deliver_at datetimeoffset(7), attempts int, last_error nvarchar(max), status varchar(16), claim_token binary(16), claim_expires_at datetimeoffset(7));
DECLARE @live bit = 0;
BEGIN TRANSACTION;
SELECT @live = 1 FROM [dbo].[outbox_lanes] AS l WITH (UPDLOCK, HOLDLOCK) WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME();
WITH c AS (SELECT TOP (@n) * FROM [dbo].[outbox] AS o WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK) WHERE @live = 1 AND o.lane = @lane AND o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) AND NOT EXISTS (SELECT 1 FROM [dbo].[outbox] AS p WHERE p.lane = @lane AND p.status = 'parked' AND p.id < o.id AND CAST(p.ordering_key AS varbinary(max)) = CAST(o.ordering_key AS varbinary(max)) AND DATALENGTH(p.ordering_key) = DATALENGTH(o.ordering_key)) AND o.id < ALL (SELECT h.id FROM (SELECT TOP (@n) b.id, b.deliver_at, b.claim_expires_at FROM [dbo].[outbox] AS b WITH (READCOMMITTEDLOCK) WHERE b.lane = @lane AND b.status = 'pending' AND NOT EXISTS (SELECT 1 FROM [dbo].[outbox] AS p WHERE p.lane = @lane AND p.status = 'parked' AND p.id < b.id AND CAST(p.ordering_key AS varbinary(max)) = CAST(b.ordering_key AS varbinary(max)) AND DATALENGTH(p.ordering_key) = DATALENGTH(b.ordering_key)) ORDER BY b.id) AS h WHERE h.deliver_at > @now OR h.claim_expires_at > @now) ORDER BY o.id)
UPDATE c SET claim_token = CAST(@tok AS binary(16)), claim_expires_at = @until OUTPUT inserted.id, inserted.message_uuid, inserted.lane, inserted.ordering_key, inserted.transport, inserted.destination, inserted.message_type, inserted.headers, inserted.body, inserted.tenant_id, inserted.created_at, inserted.deliver_at, inserted.attempts, inserted.last_error, inserted.status, inserted.claim_token, inserted.claim_expires_at INTO @claimed;
COMMIT TRANSACTION;
SELECT id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at FROM @claimed ORDER BY id;

SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at FROM [dbo].[outbox] AS o WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK) WHERE o.lane IS NULL AND o.id > CAST(@after AS binary(16)) AND o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) ORDER BY o.id

DELETE FROM [dbo].[outbox] WITH (ROWLOCK) WHERE id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)))

UPDATE [dbo].[outbox] WITH (ROWLOCK) SET claim_token = CAST(@tok AS binary(16)), claim_expires_at = @until WHERE id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)))

UPDATE [dbo].[outbox] WITH (ROWLOCK) SET attempts = attempts + 1, last_error = @err, deliver_at = CASE WHEN @retry > @now THEN @retry ELSE deliver_at END, status = CASE WHEN @park = 1 THEN 'parked' ELSE status END WHERE id = CAST(@id AS binary(16))

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET claim_expires_at = CASE WHEN claim_expires_at < @until THEN @until ELSE claim_expires_at END WHERE claim_token IS NOT NULL AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET claim_expires_at = CASE WHEN claim_expires_at < @until THEN @until ELSE claim_expires_at END WHERE claim_token IS NOT NULL AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME())

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET claim_expires_at = CASE WHEN claim_expires_at < @until THEN @until ELSE claim_expires_at END WHERE claim_token IS NOT NULL AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)), CAST(@i3 AS binary(16)))

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET claim_expires_at = CASE WHEN claim_expires_at < @until THEN @until ELSE claim_expires_at END WHERE claim_token IS NOT NULL AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)), CAST(@i3 AS binary(16))) AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME())

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET claim_token = NULL, claim_expires_at = NULL WHERE claim_token IS NOT NULL AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET claim_token = NULL, claim_expires_at = NULL WHERE claim_token IS NOT NULL AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16))) AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME())

SET NOCOUNT OFF;
DELETE FROM [dbo].[outbox] WHERE id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16))) AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now

SET NOCOUNT OFF;
DELETE FROM [dbo].[outbox] WHERE id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16))) AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME())

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET attempts = attempts + 1, last_error = @err, claim_token = NULL, claim_expires_at = NULL, deliver_at = CASE WHEN @retry > @now THEN @retry ELSE deliver_at END, status = CASE WHEN @park = 1 THEN 'parked' ELSE status END WHERE id = CAST(@id AS binary(16)) AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND status = 'pending'

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET attempts = attempts + 1, last_error = @err, claim_token = NULL, claim_expires_at = NULL, deliver_at = CASE WHEN @retry > @now THEN @retry ELSE deliver_at END, status = CASE WHEN @park = 1 THEN 'parked' ELSE status END WHERE id = CAST(@id AS binary(16)) AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND status = 'pending' AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME())

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET status = 'parked', last_error = @reason, claim_token = NULL, claim_expires_at = NULL WHERE id = CAST(@id AS binary(16)) AND status = 'pending' AND (claim_expires_at IS NULL OR claim_expires_at <= @now)

SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at FROM [dbo].[outbox] AS o WITH (READPAST, READCOMMITTEDLOCK) WHERE o.status = 'pending' AND o.lane = @lane AND o.id > CAST(@after AS binary(16)) ORDER BY o.id

SELECT ordering_key, id FROM [dbo].[outbox] WHERE status = 'parked' AND lane = @lane AND ordering_key IS NOT NULL

SET NOCOUNT OFF;
DELETE FROM [dbo].[outbox] WHERE id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16))) AND status = 'pending' AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME())

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET attempts = attempts + 1, last_error = @err, claim_token = NULL, claim_expires_at = NULL, deliver_at = CASE WHEN @retry > @now THEN @retry ELSE deliver_at END, status = CASE WHEN @park = 1 THEN 'parked' ELSE status END WHERE id = CAST(@id AS binary(16)) AND status = 'pending' AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME())

SELECT COUNT_BIG(*) FROM [dbo].[outbox] AS o WITH (READPAST, READCOMMITTEDLOCK) WHERE o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now)

SELECT 0, o.lane, COUNT_BIG(*), MIN(o.deliver_at) FROM [dbo].[outbox] AS o WITH (READPAST, READCOMMITTEDLOCK) WHERE o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) GROUP BY o.lane UNION ALL SELECT 1, NULL, COUNT_BIG(*), NULL FROM [dbo].[outbox] AS p WITH (READPAST, READCOMMITTEDLOCK) WHERE p.status = 'parked'

SELECT MAX(m.lane) FROM (SELECT MAX(lane) AS lane FROM [dbo].[outbox] WHERE status = 'pending' UNION ALL SELECT MAX(lane) FROM [dbo].[outbox] WHERE status = 'parked') AS m

SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, SUBSTRING(body, 1, @maxbody), tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, DATALENGTH(body) FROM [dbo].[outbox] AS o WHERE o.status = 'parked' AND o.id > CAST(@after AS binary(16)) ORDER BY o.id

SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, SUBSTRING(body, 1, @maxbody), tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, DATALENGTH(body) FROM [dbo].[outbox] AS o WHERE o.status = 'parked' AND o.id > CAST(@after AS binary(16)) AND CAST(o.ordering_key AS varbinary(max)) = CAST(@key AS varbinary(max)) AND DATALENGTH(o.ordering_key) = DATALENGTH(@key) ORDER BY o.id

SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, SUBSTRING(body, 1, @maxbody), tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, DATALENGTH(body) FROM [dbo].[outbox] AS o WHERE o.status = 'parked' AND o.id > CAST(@after AS binary(16)) AND o.ordering_key IS NULL ORDER BY o.id

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET status = 'pending', deliver_at = SYSUTCDATETIME(), attempts = 0, claim_token = NULL, claim_expires_at = NULL WHERE status = 'parked'

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET status = 'pending', deliver_at = SYSUTCDATETIME(), attempts = 0, claim_token = NULL, claim_expires_at = NULL WHERE status = 'parked' AND CAST(ordering_key AS varbinary(max)) = CAST(@key AS varbinary(max)) AND DATALENGTH(ordering_key) = DATALENGTH(@key)

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET status = 'pending', deliver_at = SYSUTCDATETIME(), attempts = 0, claim_token = NULL, claim_expires_at = NULL WHERE status = 'parked' AND ordering_key IS NULL

SET NOCOUNT OFF;
UPDATE [dbo].[outbox] SET status = 'pending', deliver_at = SYSUTCDATETIME(), attempts = 0, claim_token = NULL, claim_expires_at = NULL WHERE status = 'parked' AND id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)))

SET NOCOUNT OFF;
DELETE FROM [dbo].[outbox] WHERE status = 'parked'

SET NOCOUNT OFF;
DELETE FROM [dbo].[outbox] WHERE status = 'parked' AND CAST(ordering_key AS varbinary(max)) = CAST(@key AS varbinary(max)) AND DATALENGTH(ordering_key) = DATALENGTH(@key)

SET NOCOUNT OFF;
DELETE FROM [dbo].[outbox] WHERE status = 'parked' AND ordering_key IS NULL

SET NOCOUNT OFF;
DELETE FROM [dbo].[outbox] WHERE status = 'parked' AND id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)))

SET NOCOUNT OFF;
MERGE [dbo].[outbox_lanes] WITH (HOLDLOCK) AS l USING (SELECT @lane AS lane) AS s ON l.lane = s.lane WHEN MATCHED AND (l.expires_at <= SYSUTCDATETIME() OR l.token = CAST(@tok AS binary(16))) THEN UPDATE SET owner = @owner, token = CAST(@tok AS binary(16)), expires_at = CASE WHEN l.token = CAST(@tok AS binary(16)) AND l.expires_at > DATEADD(millisecond, @ttl, SYSUTCDATETIME()) THEN l.expires_at ELSE DATEADD(millisecond, @ttl, SYSUTCDATETIME()) END WHEN NOT MATCHED THEN INSERT (lane, owner, token, expires_at) VALUES (s.lane, @owner, CAST(@tok AS binary(16)), DATEADD(millisecond, @ttl, SYSUTCDATETIME()));

SET NOCOUNT OFF;
UPDATE [dbo].[outbox_lanes] SET expires_at = CASE WHEN expires_at < DATEADD(millisecond, @ttl, SYSUTCDATETIME()) THEN DATEADD(millisecond, @ttl, SYSUTCDATETIME()) ELSE expires_at END WHERE lane = @lane AND token = CAST(@tok AS binary(16)) AND expires_at > SYSUTCDATETIME()

SET NOCOUNT OFF;
DELETE FROM [dbo].[outbox_lanes] WHERE lane = @lane AND token = CAST(@tok AS binary(16))

SELECT lane, owner, token, expires_at, CAST(CASE WHEN expires_at > SYSUTCDATETIME() THEN 1 ELSE 0 END AS bit) FROM [dbo].[outbox_lanes] ORDER BY lane

MERGE [dbo].[outbox_nodes] WITH (HOLDLOCK) AS n USING (SELECT @owner AS owner) AS s ON n.owner = s.owner WHEN MATCHED THEN UPDATE SET expires_at = DATEADD(millisecond, @ttl, SYSUTCDATETIME()) WHEN NOT MATCHED THEN INSERT (owner, expires_at) VALUES (s.owner, DATEADD(millisecond, @ttl, SYSUTCDATETIME()));

SELECT owner FROM [dbo].[outbox_nodes] WHERE expires_at > SYSUTCDATETIME()

DELETE FROM [dbo].[outbox_nodes] WHERE owner = @owner

INSERT INTO [dbo].[outbox] (id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at) VALUES (@p1, @p2, @p3, @p4, @p5, @p6, @p7, @p8, @p9, @p10, @p11, @p12), (@p13, @p14, @p15, @p16, @p17, @p18, @p19, @p20, @p21, @p22, @p23, @p24)

DECLARE @r int;
EXEC @r = sp_getapplock @Resource = N'watermill-outbox/create-schema', @LockMode = N'Exclusive', @LockOwner = N'Session', @LockTimeout = 60000;
IF @r < 0 RAISERROR(N'watermill-outbox: sp_getapplock for the schema returned %d', 16, 1, @r);

EXEC sp_releaseapplock @Resource = N'watermill-outbox/create-schema', @LockOwner = N'Session';

SET XACT_ABORT OFF;
INSERT INTO [dbo].[inbox] (consumer, message_uuid, processed_at) VALUES (@consumer, @uuid, @at)

UPDATE [dbo].[inbox] SET duplicates = duplicates + 1 WHERE consumer = @consumer AND message_uuid = @uuid

SET NOCOUNT OFF;
WITH batch AS (SELECT TOP (@limit) processed_at FROM [dbo].[inbox] WITH (READPAST) WHERE processed_at < @before ORDER BY processed_at) DELETE FROM batch

SELECT TOP (1) consumer, duplicates FROM [dbo].[inbox] WHERE consumer > @after ORDER BY consumer

SELECT COUNT_BIG(*), MIN(processed_at), COALESCE(SUM(duplicates), 0) FROM (SELECT TOP (@n) processed_at, duplicates FROM [dbo].[inbox] WHERE consumer = @consumer ORDER BY message_uuid) AS t

SELECT MIN(processed_at) FROM [dbo].[inbox]

SELECT COALESCE(SUM(rows), 0) FROM sys.partitions WHERE object_id = OBJECT_ID(@table) AND index_id IN (0, 1)

SET NOCOUNT OFF;
MERGE [dbo].[inbox_lease] WITH (HOLDLOCK) AS l USING (SELECT 'retention' AS name) AS s ON l.name = s.name WHEN MATCHED AND (l.expires_at <= @now OR l.token = CAST(@tok AS binary(16))) THEN UPDATE SET owner = @owner, token = CAST(@tok AS binary(16)), expires_at = CASE WHEN l.expires_at > @until THEN l.expires_at ELSE @until END WHEN NOT MATCHED THEN INSERT (name, owner, token, expires_at) VALUES (s.name, @owner, CAST(@tok AS binary(16)), @until);

SET NOCOUNT OFF;
DELETE FROM [dbo].[inbox_lease] WHERE name = 'retention' AND token = CAST(@tok AS binary(16))

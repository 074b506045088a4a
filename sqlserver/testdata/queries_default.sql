SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq FROM [dbo].[outbox] AS o WITH (READPAST, READCOMMITTEDLOCK) WHERE o.lane IS NULL AND o.id > CAST(@after AS binary(16)) AND o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) ORDER BY o.id

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq FROM [dbo].[outbox] AS o WITH (READCOMMITTEDLOCK) WHERE o.lane = @lane AND o.id > CAST(@after AS binary(16)) AND o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) ORDER BY o.id

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @claimed TABLE (id binary(16) NOT NULL PRIMARY KEY, message_uuid nvarchar(max), lane int, ordering_key nvarchar(max), transport nvarchar(max), destination nvarchar(max), message_type nvarchar(max), headers varbinary(max), body varbinary(max), tenant_id nvarchar(max), created_at datetimeoffset(7), deliver_at datetimeoffset(7), attempts int, last_error nvarchar(max), status varchar(16), claim_token binary(16), claim_expires_at datetimeoffset(7), seq bigint);
WITH c AS (SELECT TOP (@n) * FROM [dbo].[outbox] AS o WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK) WHERE o.lane IS NULL AND o.id > CAST(@after AS binary(16)) AND o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) ORDER BY o.id)
UPDATE c SET claim_token = CAST(@tok AS binary(16)), claim_expires_at = @until OUTPUT inserted.id, inserted.message_uuid, inserted.lane, inserted.ordering_key, inserted.transport, inserted.destination, inserted.message_type, inserted.headers, inserted.body, inserted.tenant_id, inserted.created_at, inserted.deliver_at, inserted.attempts, inserted.last_error, inserted.status, inserted.claim_token, inserted.claim_expires_at, inserted.seq INTO @claimed;
SELECT id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq FROM @claimed ORDER BY id;

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET XACT_ABORT ON;
DECLARE @claimed TABLE (id binary(16) NOT NULL PRIMARY KEY, message_uuid nvarchar(max), lane int, ordering_key nvarchar(max), transport nvarchar(max), destination nvarchar(max), message_type nvarchar(max), headers varbinary(max), body varbinary(max), tenant_id nvarchar(max), created_at datetimeoffset(7), deliver_at datetimeoffset(7), attempts int, last_error nvarchar(max), status varchar(16), claim_token binary(16), claim_expires_at datetimeoffset(7), seq bigint);
DECLARE @live bit = 0;
BEGIN TRANSACTION;
SELECT @live = 1 FROM [dbo].[outbox_lanes] AS l WITH (UPDLOCK, HOLDLOCK) WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME();
WITH c AS (SELECT TOP (@n) * FROM [dbo].[outbox] AS o WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK) WHERE @live = 1 AND o.lane = @lane AND o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) AND o.seq < ALL (SELECT h.seq FROM (SELECT TOP (@n) b.seq, b.deliver_at, b.claim_expires_at FROM [dbo].[outbox] AS b WITH (READCOMMITTEDLOCK) WHERE b.lane = @lane AND b.status = 'pending' ORDER BY b.seq) AS h WHERE h.deliver_at > @now OR h.claim_expires_at > @now) ORDER BY o.seq)
UPDATE c SET claim_token = CAST(@tok AS binary(16)), claim_expires_at = @until OUTPUT inserted.id, inserted.message_uuid, inserted.lane, inserted.ordering_key, inserted.transport, inserted.destination, inserted.message_type, inserted.headers, inserted.body, inserted.tenant_id, inserted.created_at, inserted.deliver_at, inserted.attempts, inserted.last_error, inserted.status, inserted.claim_token, inserted.claim_expires_at, inserted.seq INTO @claimed;
COMMIT TRANSACTION;
SELECT id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq FROM @claimed ORDER BY seq;

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET XACT_ABORT ON;
DECLARE @claimed TABLE (id binary(16) NOT NULL PRIMARY KEY, message_uuid nvarchar(max), lane int, ordering_key nvarchar(max), transport nvarchar(max), destination nvarchar(max), message_type nvarchar(max), headers varbinary(max), body varbinary(max), tenant_id nvarchar(max), created_at datetimeoffset(7), deliver_at datetimeoffset(7), attempts int, last_error nvarchar(max), status varchar(16), claim_token binary(16), claim_expires_at datetimeoffset(7), seq bigint);
DECLARE @live bit = 0;
BEGIN TRANSACTION;
SELECT @live = 1 FROM [dbo].[outbox_lanes] AS l WITH (UPDLOCK, HOLDLOCK) WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME();
WITH c AS (SELECT TOP (@n) * FROM [dbo].[outbox] AS o WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK) WHERE @live = 1 AND o.lane = @lane AND o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) AND NOT EXISTS (SELECT 1 FROM [dbo].[outbox] AS p WHERE p.lane = @lane AND p.status = 'parked' AND p.seq < o.seq AND CAST(p.ordering_key AS varbinary(max)) = CAST(o.ordering_key AS varbinary(max)) AND DATALENGTH(p.ordering_key) = DATALENGTH(o.ordering_key)) AND o.seq < ALL (SELECT h.seq FROM (SELECT TOP (@n) b.seq, b.deliver_at, b.claim_expires_at FROM [dbo].[outbox] AS b WITH (READCOMMITTEDLOCK) WHERE b.lane = @lane AND b.status = 'pending' AND NOT EXISTS (SELECT 1 FROM [dbo].[outbox] AS p WHERE p.lane = @lane AND p.status = 'parked' AND p.seq < b.seq AND CAST(p.ordering_key AS varbinary(max)) = CAST(b.ordering_key AS varbinary(max)) AND DATALENGTH(p.ordering_key) = DATALENGTH(b.ordering_key)) ORDER BY b.seq) AS h WHERE h.deliver_at > @now OR h.claim_expires_at > @now) ORDER BY o.seq)
UPDATE c SET claim_token = CAST(@tok AS binary(16)), claim_expires_at = @until OUTPUT inserted.id, inserted.message_uuid, inserted.lane, inserted.ordering_key, inserted.transport, inserted.destination, inserted.message_type, inserted.headers, inserted.body, inserted.tenant_id, inserted.created_at, inserted.deliver_at, inserted.attempts, inserted.last_error, inserted.status, inserted.claim_token, inserted.claim_expires_at, inserted.seq INTO @claimed;
COMMIT TRANSACTION;
SELECT id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq FROM @claimed ORDER BY seq;

SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq FROM [dbo].[outbox] AS o WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK) WHERE o.lane IS NULL AND o.id > CAST(@after AS binary(16)) AND o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) ORDER BY o.id

DELETE FROM [dbo].[outbox] WITH (ROWLOCK) WHERE id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)))

UPDATE [dbo].[outbox] WITH (ROWLOCK) SET claim_token = CAST(@tok AS binary(16)), claim_expires_at = @until WHERE id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)))

UPDATE [dbo].[outbox] WITH (ROWLOCK) SET attempts = attempts + 1, last_error = @err, deliver_at = CASE WHEN @retry > @now THEN @retry ELSE deliver_at END, status = CASE WHEN @park = 1 THEN 'parked' ELSE status END WHERE id = CAST(@id AS binary(16))

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET claim_expires_at = CASE WHEN claim_expires_at < @until THEN @until ELSE claim_expires_at END OUTPUT 1 INTO @changed WHERE claim_token IS NOT NULL AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now;
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET claim_expires_at = CASE WHEN claim_expires_at < @until THEN @until ELSE claim_expires_at END OUTPUT 1 INTO @changed WHERE claim_token IS NOT NULL AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME());
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET claim_expires_at = CASE WHEN claim_expires_at < @until THEN @until ELSE claim_expires_at END OUTPUT 1 INTO @changed WHERE claim_token IS NOT NULL AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)), CAST(@i3 AS binary(16)));
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET claim_expires_at = CASE WHEN claim_expires_at < @until THEN @until ELSE claim_expires_at END OUTPUT 1 INTO @changed WHERE claim_token IS NOT NULL AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)), CAST(@i3 AS binary(16))) AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME());
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET claim_token = NULL, claim_expires_at = NULL OUTPUT 1 INTO @changed WHERE claim_token IS NOT NULL AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now;
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET claim_token = NULL, claim_expires_at = NULL OUTPUT 1 INTO @changed WHERE claim_token IS NOT NULL AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16))) AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME());
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
DELETE FROM [dbo].[outbox] OUTPUT 1 INTO @changed WHERE id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16))) AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now;
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
DELETE FROM [dbo].[outbox] OUTPUT 1 INTO @changed WHERE id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16))) AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME());
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET attempts = attempts + 1, last_error = @err, claim_token = NULL, claim_expires_at = NULL, deliver_at = CASE WHEN @retry > @now THEN @retry ELSE deliver_at END, status = CASE WHEN @park = 1 THEN 'parked' ELSE status END OUTPUT 1 INTO @changed WHERE id = CAST(@id AS binary(16)) AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND status = 'pending';
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET attempts = attempts + 1, last_error = @err, claim_token = NULL, claim_expires_at = NULL, deliver_at = CASE WHEN @retry > @now THEN @retry ELSE deliver_at END, status = CASE WHEN @park = 1 THEN 'parked' ELSE status END OUTPUT 1 INTO @changed WHERE id = CAST(@id AS binary(16)) AND claim_token = CAST(@tok AS binary(16)) AND claim_expires_at > @now AND status = 'pending' AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME());
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET status = 'parked', last_error = @reason, claim_token = NULL, claim_expires_at = NULL OUTPUT 1 INTO @changed WHERE id = CAST(@id AS binary(16)) AND status = 'pending' AND (claim_expires_at IS NULL OR claim_expires_at <= @now);
SELECT COUNT_BIG(*) FROM @changed;

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq FROM [dbo].[outbox] AS o WITH (READCOMMITTEDLOCK) WHERE o.status = 'pending' AND o.lane = @lane AND o.seq > @after ORDER BY o.seq

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT ordering_key, seq FROM [dbo].[outbox] WITH (READCOMMITTEDLOCK) WHERE status = 'parked' AND lane = @lane AND ordering_key IS NOT NULL

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
DELETE FROM [dbo].[outbox] OUTPUT 1 INTO @changed WHERE id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16))) AND status = 'pending' AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME());
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET attempts = attempts + 1, last_error = @err, claim_token = NULL, claim_expires_at = NULL, deliver_at = CASE WHEN @retry > @now THEN @retry ELSE deliver_at END, status = CASE WHEN @park = 1 THEN 'parked' ELSE status END OUTPUT 1 INTO @changed WHERE id = CAST(@id AS binary(16)) AND status = 'pending' AND lane = @lane AND EXISTS (SELECT 1 FROM [dbo].[outbox_lanes] AS l WHERE l.lane = @lane AND l.token = CAST(@lease AS binary(16)) AND l.expires_at > SYSUTCDATETIME());
SELECT COUNT_BIG(*) FROM @changed;

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT COUNT_BIG(*) FROM [dbo].[outbox] AS o WITH (READPAST, READCOMMITTEDLOCK) WHERE o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now)

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT 0, o.lane, COUNT_BIG(*), MIN(o.deliver_at) FROM [dbo].[outbox] AS o WITH (READPAST, READCOMMITTEDLOCK) WHERE o.status = 'pending' AND o.deliver_at <= @now AND (o.claim_expires_at IS NULL OR o.claim_expires_at <= @now) GROUP BY o.lane UNION ALL SELECT 1, NULL, COUNT_BIG(*), NULL FROM [dbo].[outbox] AS p WITH (READPAST, READCOMMITTEDLOCK) WHERE p.status = 'parked'

SELECT MAX(m.lane) FROM (SELECT MAX(lane) AS lane FROM [dbo].[outbox] WITH (READUNCOMMITTED) WHERE status = 'pending' UNION ALL SELECT MAX(lane) FROM [dbo].[outbox] WITH (READUNCOMMITTED) WHERE status = 'parked') AS m

SELECT CASE WHEN OBJECT_ID(N'[dbo].[outbox]', N'U') IS NOT NULL AND COL_LENGTH(N'[dbo].[outbox]', N'seq') IS NULL THEN 1 ELSE 0 END

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT MIN(lane) FROM [dbo].[outbox] WITH (READPAST, READCOMMITTEDLOCK) WHERE status = 'pending' AND lane > @after

SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, SUBSTRING(body, 1, @maxbody), tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq, DATALENGTH(body) FROM [dbo].[outbox] AS o WHERE o.status = 'parked' AND o.id > CAST(@after AS binary(16)) ORDER BY o.id

SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, SUBSTRING(body, 1, @maxbody), tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq, DATALENGTH(body) FROM [dbo].[outbox] AS o WHERE o.status = 'parked' AND o.id > CAST(@after AS binary(16)) AND CAST(o.ordering_key AS varbinary(max)) = CAST(@key AS varbinary(max)) AND DATALENGTH(o.ordering_key) = DATALENGTH(@key) ORDER BY o.id

SELECT TOP (@n) id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, SUBSTRING(body, 1, @maxbody), tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq, DATALENGTH(body) FROM [dbo].[outbox] AS o WHERE o.status = 'parked' AND o.id > CAST(@after AS binary(16)) AND o.ordering_key IS NULL ORDER BY o.id

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET status = 'pending', deliver_at = SYSUTCDATETIME(), attempts = 0, claim_token = NULL, claim_expires_at = NULL OUTPUT 1 INTO @changed WHERE status = 'parked';
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET status = 'pending', deliver_at = SYSUTCDATETIME(), attempts = 0, claim_token = NULL, claim_expires_at = NULL OUTPUT 1 INTO @changed WHERE status = 'parked' AND CAST(ordering_key AS varbinary(max)) = CAST(@key AS varbinary(max)) AND DATALENGTH(ordering_key) = DATALENGTH(@key);
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET status = 'pending', deliver_at = SYSUTCDATETIME(), attempts = 0, claim_token = NULL, claim_expires_at = NULL OUTPUT 1 INTO @changed WHERE status = 'parked' AND ordering_key IS NULL;
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox] SET status = 'pending', deliver_at = SYSUTCDATETIME(), attempts = 0, claim_token = NULL, claim_expires_at = NULL OUTPUT 1 INTO @changed WHERE status = 'parked' AND id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)));
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
DELETE FROM [dbo].[outbox] OUTPUT 1 INTO @changed WHERE status = 'parked';
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
DELETE FROM [dbo].[outbox] OUTPUT 1 INTO @changed WHERE status = 'parked' AND CAST(ordering_key AS varbinary(max)) = CAST(@key AS varbinary(max)) AND DATALENGTH(ordering_key) = DATALENGTH(@key);
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
DELETE FROM [dbo].[outbox] OUTPUT 1 INTO @changed WHERE status = 'parked' AND ordering_key IS NULL;
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
DELETE FROM [dbo].[outbox] OUTPUT 1 INTO @changed WHERE status = 'parked' AND id IN (CAST(@i1 AS binary(16)), CAST(@i2 AS binary(16)));
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
MERGE [dbo].[outbox_lanes] WITH (HOLDLOCK) AS l USING (SELECT @lane AS lane) AS s ON l.lane = s.lane WHEN MATCHED AND (l.expires_at <= SYSUTCDATETIME() OR l.token = CAST(@tok AS binary(16))) THEN UPDATE SET owner = @owner, token = CAST(@tok AS binary(16)), expires_at = CASE WHEN l.token = CAST(@tok AS binary(16)) AND l.expires_at > DATEADD(millisecond, @ttl, SYSUTCDATETIME()) THEN l.expires_at ELSE DATEADD(millisecond, @ttl, SYSUTCDATETIME()) END WHEN NOT MATCHED THEN INSERT (lane, owner, token, expires_at) VALUES (s.lane, @owner, CAST(@tok AS binary(16)), DATEADD(millisecond, @ttl, SYSUTCDATETIME())) OUTPUT 1 INTO @changed;
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
UPDATE [dbo].[outbox_lanes] SET expires_at = CASE WHEN expires_at < DATEADD(millisecond, @ttl, SYSUTCDATETIME()) THEN DATEADD(millisecond, @ttl, SYSUTCDATETIME()) ELSE expires_at END OUTPUT 1 INTO @changed WHERE lane = @lane AND token = CAST(@tok AS binary(16)) AND expires_at > SYSUTCDATETIME();
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
DELETE FROM [dbo].[outbox_lanes] OUTPUT 1 INTO @changed WHERE lane = @lane AND token = CAST(@tok AS binary(16));
SELECT COUNT_BIG(*) FROM @changed;

SELECT lane, owner, token, expires_at, CAST(CASE WHEN expires_at > SYSUTCDATETIME() THEN 1 ELSE 0 END AS bit) FROM [dbo].[outbox_lanes] ORDER BY lane

MERGE [dbo].[outbox_nodes] WITH (HOLDLOCK) AS n USING (SELECT CAST(@owner AS nvarchar(400)) AS owner) AS s ON n.owner = s.owner WHEN MATCHED THEN UPDATE SET expires_at = DATEADD(millisecond, @ttl, SYSUTCDATETIME()) WHEN NOT MATCHED THEN INSERT (owner, expires_at) VALUES (s.owner, DATEADD(millisecond, @ttl, SYSUTCDATETIME()));

SELECT owner FROM [dbo].[outbox_nodes] WHERE expires_at > SYSUTCDATETIME()

DELETE FROM [dbo].[outbox_nodes] WHERE owner = CAST(@owner AS nvarchar(400))

INSERT INTO [dbo].[outbox] (id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, tenant_id, created_at, deliver_at) VALUES (@p1, @p2, @p3, CASE WHEN DATALENGTH(@p4) > 0 THEN @p4 END, @p5, @p6, CASE WHEN DATALENGTH(@p7) > 0 THEN @p7 END, CONVERT(varbinary(max), @p8, 2), CONVERT(varbinary(max), @p9, 2), CASE WHEN DATALENGTH(@p10) > 0 THEN @p10 END, @p11, @p12), (@p13, @p14, @p15, CASE WHEN DATALENGTH(@p16) > 0 THEN @p16 END, @p17, @p18, CASE WHEN DATALENGTH(@p19) > 0 THEN @p19 END, CONVERT(varbinary(max), @p20, 2), CONVERT(varbinary(max), @p21, 2), CASE WHEN DATALENGTH(@p22) > 0 THEN @p22 END, @p23, @p24)

DECLARE @r int;
EXEC @r = sp_getapplock @Resource = N'watermill-outbox/create-schema', @LockMode = N'Exclusive', @LockOwner = N'Session', @LockTimeout = 60000;
IF @r < 0 RAISERROR(N'watermill-outbox: sp_getapplock for the schema returned %d', 16, 1, @r);

EXEC sp_releaseapplock @Resource = N'watermill-outbox/create-schema', @LockOwner = N'Session';

SET XACT_ABORT OFF;
INSERT INTO [dbo].[inbox] (consumer, message_uuid, processed_at) VALUES (CONVERT(varbinary(400), @consumer, 2), CONVERT(varbinary(400), @uuid, 2), @at)

UPDATE [dbo].[inbox] SET duplicates = duplicates + 1 WHERE consumer = CONVERT(varbinary(400), @consumer, 2) AND message_uuid = CONVERT(varbinary(400), @uuid, 2)

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
WITH batch AS (SELECT TOP (@limit) processed_at FROM [dbo].[inbox] WITH (READPAST, READCOMMITTEDLOCK) WHERE processed_at < @before ORDER BY processed_at) DELETE FROM batch OUTPUT 1 INTO @changed;
SELECT COUNT_BIG(*) FROM @changed;

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT TOP (1) consumer, duplicates FROM [dbo].[inbox] WITH (READPAST, READCOMMITTEDLOCK) WHERE consumer > @after ORDER BY consumer

SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT COUNT_BIG(*), MIN(processed_at), COALESCE(SUM(duplicates), 0) FROM (SELECT TOP (@n) processed_at, duplicates FROM [dbo].[inbox] WITH (READPAST, READCOMMITTEDLOCK) WHERE consumer = @consumer ORDER BY message_uuid) AS t

SELECT MIN(processed_at) FROM [dbo].[inbox]

SELECT COALESCE(SUM(rows), 0) FROM sys.partitions WHERE object_id = OBJECT_ID(@table) AND index_id IN (0, 1)

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
MERGE [dbo].[inbox_lease] WITH (HOLDLOCK) AS l USING (SELECT 'retention' AS name) AS s ON l.name = s.name WHEN MATCHED AND (l.expires_at <= @now OR l.token = CAST(@tok AS binary(16))) THEN UPDATE SET owner = @owner, token = CAST(@tok AS binary(16)), expires_at = CASE WHEN l.expires_at > @until THEN l.expires_at ELSE @until END WHEN NOT MATCHED THEN INSERT (name, owner, token, expires_at) VALUES (s.name, @owner, CAST(@tok AS binary(16)), @until) OUTPUT 1 INTO @changed;
SELECT COUNT_BIG(*) FROM @changed;

SET NOCOUNT ON;
DECLARE @changed TABLE (n int NOT NULL);
DELETE FROM [dbo].[inbox_lease] OUTPUT 1 INTO @changed WHERE name = 'retention' AND token = CAST(@tok AS binary(16));
SELECT COUNT_BIG(*) FROM @changed;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import java.util.zip.CRC32;

import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.cassandra.config.Config;
import org.apache.cassandra.config.DatabaseDescriptor;
import org.apache.cassandra.config.DurationSpec;
import org.apache.cassandra.cql3.statements.schema.CreateTableStatement;
import org.apache.cassandra.db.Clustering;
import org.apache.cassandra.db.Mutation;
import org.apache.cassandra.db.commitlog.CommitLogDescriptor;
import org.apache.cassandra.db.commitlog.CommitLogPosition;
import org.apache.cassandra.db.commitlog.CommitLogReadHandler;
import org.apache.cassandra.db.commitlog.CommitLogReader;
import org.apache.cassandra.db.partitions.PartitionUpdate;
import org.apache.cassandra.db.rows.Cell;
import org.apache.cassandra.db.rows.Row;
import org.apache.cassandra.io.util.File;
import org.apache.cassandra.schema.KeyspaceMetadata;
import org.apache.cassandra.schema.KeyspaceParams;
import org.apache.cassandra.schema.Schema;
import org.apache.cassandra.schema.TableId;
import org.apache.cassandra.schema.TableMetadata;
import org.apache.cassandra.schema.Tables;
import org.apache.cassandra.utils.FBUtilities;

/**
 * Cassandra's own commit-log reader (cassandra-all's {@link CommitLogReader}, the engine of the Java CDC tools)
 * timed over the segments bench/decoder_throughput.py decodes, so its report sets our decoder beside it.
 *
 * <pre>
 *   CommitLogReaderThroughput --tables FILE [--runs N] [--warmup-passes N] [--warmup-seconds S] SEGMENT...
 * </pre>
 *
 * FILE holds one table a line: its keyspace, a tab, and its CREATE TABLE statement with {@code ID = <uuid>}
 * (the id the segments were written with; without it Cassandra skips the table's mutations as unknown).
 * Segments are read in the order given, each in full, one thread. The first pass is the check pass: it also
 * sums what the Python side sums over the same updates (rows, cells, value bytes, a CRC-32 checksum of every
 * key, clustering and cell value, the cells' timestamps), so the caller can tell both decoders read the
 * same data. Then warm-up passes for the JIT, then the timed passes. Progress goes to stderr; the last line
 * on stdout is {@code RESULT <json>}. Exit status 1 when a read error was not a tolerated torn tail, or no
 * mutation of the given tables was decoded.
 */
public final class CommitLogReaderThroughput
{
    public static void main(String[] args) throws Exception
    {
        Path tablesFile = null;
        int runs = 10, warmupPasses = 5;
        double warmupSeconds = 5.0;
        List<File> segments = new ArrayList<>();
        for (int i = 0; i < args.length; i++)
        {
            switch (args[i])
            {
                case "--tables": tablesFile = Paths.get(args[++i]); break;
                case "--runs": runs = Integer.parseInt(args[++i]); break;
                case "--warmup-passes": warmupPasses = Integer.parseInt(args[++i]); break;
                case "--warmup-seconds": warmupSeconds = Double.parseDouble(args[++i]); break;
                default:
                    if (args[i].startsWith("--"))
                        fail("unknown option " + args[i]);
                    segments.add(new File(args[i]));
            }
        }
        if (tablesFile == null || segments.isEmpty())
            fail("usage: CommitLogReaderThroughput --tables FILE [--runs N] [--warmup-passes N] "
                 + "[--warmup-seconds S] SEGMENT...");
        if (runs < 1 || warmupPasses < 0 || warmupSeconds < 0)
            fail("--runs must be >= 1, --warmup-passes and --warmup-seconds >= 0");
        long bytes = 0;
        for (File f : segments)
        {
            if (!f.isFile())
                fail("no such segment: " + f);
            bytes += f.length();
        }

        Path scratch = Files.createTempDirectory("cdc-bench-commitlog-reader-");
        int status;
        try
        {
            status = run(tablesFile, segments, bytes, runs, warmupPasses, warmupSeconds, scratch);
        }
        finally
        {
            deleteTree(scratch);
        }
        // Cassandra's static initialisers leave non-daemon executor threads behind.
        System.exit(status);
    }

    private static int run(Path tablesFile, List<File> segments, long bytes, int runs, int warmupPasses,
                           double warmupSeconds, Path scratch) throws IOException
    {
        startOffline(scratch);
        Set<TableId> tables = registerTables(tablesFile);

        Tally check = readAll(segments, tables, true);
        List<String> problems = new ArrayList<>(check.errors);
        if (check.mutations == 0)
            problems.add("no mutation of the given tables was decoded: do the CREATE TABLE statements carry "
                         + "the ids the segments were written with (WITH ID = ...)?");
        System.err.printf("check pass: %,d mutations of the given tables, %,d cells; %,d updates of other "
                          + "tables; %d problems%n", check.mutations, check.cells, check.otherUpdates,
                          problems.size());

        int passes = 0;
        long warmupStart = System.nanoTime();
        while (passes < warmupPasses || (System.nanoTime() - warmupStart) / 1e9 < warmupSeconds)
        {
            readAll(segments, tables, false);
            passes++;
        }
        double warmupTook = (System.nanoTime() - warmupStart) / 1e9;
        System.err.printf("JIT warm-up: %d passes in %.1f s%n", passes, warmupTook);

        List<Double> seconds = new ArrayList<>();
        for (int i = 0; i < runs; i++)
        {
            long started = System.nanoTime();
            Tally t = readAll(segments, tables, false);
            double took = (System.nanoTime() - started) / 1e9;
            seconds.add(took);
            if (t.mutations != check.mutations || t.cells != check.cells)
                problems.add(String.format("timed pass %d read %d mutations and %d cells, the check pass %d and %d",
                                           i + 1, t.mutations, t.cells, check.mutations, check.cells));
            System.err.printf("pass %d/%d: %.3f s, %,.0f mutations/s%n", i + 1, runs, took, t.mutations / took);
        }

        Map<String, Object> result = new LinkedHashMap<>();
        result.put("cassandra", FBUtilities.getReleaseVersionString());
        result.put("java", Runtime.version().toString());
        result.put("segments", segments.size());
        result.put("bytes", bytes);
        result.put("mutations", check.mutations);
        result.put("updates", check.updates);
        result.put("rows", check.rows);
        result.put("cells", check.cells);
        result.put("value_bytes", check.valueBytes);
        result.put("content_crc_sum", Long.toUnsignedString(check.contentCrcSum));
        result.put("timestamp_sum", Long.toUnsignedString(check.timestampSum));
        result.put("other_updates", check.otherUpdates);
        result.put("tolerated", check.tolerated);
        result.put("problems", problems);
        result.put("warmup_passes", passes);
        result.put("warmup_s", warmupTook);
        result.put("run_seconds", seconds);
        System.out.println("RESULT " + new ObjectMapper().writeValueAsString(result));
        return problems.isEmpty() ? 0 : 1;
    }

    /**
     * Cassandra as an offline tool: a Config made here instead of a cassandra.yaml (the partitioner the nodes
     * use, every directory in the scratch folder, which the static initialisers create things in), then tool
     * initialisation, under which the schema is only what this process registers.
     */
    private static void startOffline(Path scratch)
    {
        Config.setOverrideLoadConfig(() -> {
            Config c = new Config();
            c.cluster_name = "cdc-bench";
            c.partitioner = "org.apache.cassandra.dht.Murmur3Partitioner";
            c.endpoint_snitch = "org.apache.cassandra.locator.SimpleSnitch";
            c.commitlog_sync = Config.CommitLogSync.periodic;
            c.commitlog_sync_period = new DurationSpec.IntMillisecondsBound("10s");
            c.data_file_directories = new String[]{ scratch.resolve("data").toString() };
            c.commitlog_directory = scratch.resolve("commitlog").toString();
            c.cdc_raw_directory = scratch.resolve("cdc_raw").toString();
            c.hints_directory = scratch.resolve("hints").toString();
            c.saved_caches_directory = scratch.resolve("saved_caches").toString();
            return c;
        });
        DatabaseDescriptor.toolInitialization();
    }

    /** The tables of the file, registered in Cassandra's schema by keyspace; their ids. */
    private static Set<TableId> registerTables(Path file) throws IOException
    {
        Map<String, List<TableMetadata>> byKeyspace = new LinkedHashMap<>();
        int lineNumber = 0;
        for (String line : Files.readAllLines(file))
        {
            lineNumber++;
            if (line.isBlank())
                continue;
            int tab = line.indexOf('\t');
            if (tab < 1)
                fail(file + " line " + lineNumber + ": expected <keyspace> TAB <CREATE TABLE statement>");
            String keyspace = line.substring(0, tab);
            TableMetadata table = CreateTableStatement.parse(line.substring(tab + 1), keyspace).build();
            byKeyspace.computeIfAbsent(keyspace, k -> new ArrayList<>()).add(table);
        }
        Set<TableId> ids = new HashSet<>();
        for (Map.Entry<String, List<TableMetadata>> e : byKeyspace.entrySet())
        {
            // Replication plays no part in reading a segment.
            KeyspaceMetadata keyspace = KeyspaceMetadata.create(e.getKey(), KeyspaceParams.simple(1),
                                                                Tables.of(e.getValue()));
            Schema.instance.transform(schema -> schema.withAddedOrUpdated(keyspace));
            for (TableMetadata t : e.getValue())
            {
                ids.add(t.id);
                System.err.printf("table %s.%s id=%s%n", t.keyspace, t.name, t.id);
            }
        }
        if (ids.isEmpty())
            fail("no table in " + file);
        return ids;
    }

    /** One pass: a new reader over every segment, whole (up to its torn tail, as Cassandra's replay reads). */
    private static Tally readAll(List<File> segments, Set<TableId> tables, boolean checksums) throws IOException
    {
        Tally tally = new Tally(tables, checksums);
        CommitLogReader reader = new CommitLogReader();
        for (File segment : segments)
            reader.readCommitLogSegment(tally, segment, CommitLogPosition.NONE, CommitLogReader.ALL_MUTATIONS, true);
        return tally;
    }

    /** What the reader hands over, counted; every row and cell is visited, as a consumer would. */
    static final class Tally implements CommitLogReadHandler
    {
        private final Set<TableId> tables;
        private final boolean checksums;
        private final CRC32 crc = new CRC32();
        long mutations, updates, otherUpdates, rows, cells, valueBytes, contentCrcSum, timestampSum;
        final List<String> errors = new ArrayList<>();
        final List<String> tolerated = new ArrayList<>();

        Tally(Set<TableId> tables, boolean checksums)
        {
            this.tables = tables;
            this.checksums = checksums;
        }

        @Override
        public boolean shouldSkipSegmentOnError(CommitLogReadException e)
        {
            note(e);
            return false;
        }

        @Override
        public void handleUnrecoverableError(CommitLogReadException e)
        {
            note(e);
        }

        /** A torn tail of the last section is what a live segment has; an unreadable descriptor loses it all. */
        private void note(CommitLogReadException e)
        {
            String text = e.reason + ": " + e.getMessage();
            boolean lost = e.reason == CommitLogReadErrorReason.UNRECOVERABLE_UNKNOWN_ERROR
                           || String.valueOf(e.getMessage()).startsWith("Could not read commit log descriptor");
            (e.permissible && !lost ? tolerated : errors).add(text);
        }

        @Override
        public void handleMutation(Mutation mutation, int size, int entryLocation, CommitLogDescriptor descriptor)
        {
            boolean counted = false;
            for (PartitionUpdate update : mutation.getPartitionUpdates())
            {
                if (!tables.contains(update.metadata().id))
                {
                    otherUpdates++;
                    continue;
                }
                counted = true;
                updates++;
                if (checksums)
                    contentCrcSum += crc32(update.partitionKey().getKey());
                Row staticRow = update.staticRow();
                if (!staticRow.isEmpty())
                    visit(staticRow);
                for (Row row : update)
                    visit(row);
            }
            if (counted)
                mutations++;
        }

        private void visit(Row row)
        {
            rows++;
            if (checksums)
            {
                Clustering<?> clustering = row.clustering();
                for (int i = 0; i < clustering.size(); i++)
                {
                    ByteBuffer value = clustering.bufferAt(i);
                    if (value != null)
                        contentCrcSum += crc32(value);
                }
            }
            for (Cell<?> cell : row.cells())
            {
                cells++;
                valueBytes += cell.valueSize();
                if (checksums)
                {
                    contentCrcSum += crc32(cell.buffer());
                    timestampSum += cell.timestamp();
                }
            }
        }

        private long crc32(ByteBuffer value)
        {
            crc.reset();
            crc.update(value.duplicate());
            return crc.getValue();
        }
    }

    private static void fail(String message)
    {
        System.err.println("error: " + message);
        System.exit(2);
    }

    private static void deleteTree(Path root)
    {
        try (Stream<Path> paths = Files.walk(root))
        {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
        catch (IOException ignored)
        {
            // a scratch folder under the temp directory; nothing else to do
        }
    }
}

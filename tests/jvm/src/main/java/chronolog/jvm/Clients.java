package chronolog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DeletedRecords;
import org.apache.kafka.clients.admin.DescribeProducersResult.PartitionProducerState;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import java.util.Locale;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka's Java clients driven by JSON lines, for the tests (tests/oracle/kafka_oracle.py's
 * JavaClients). Usage: {@code Clients <bootstrap> [name=value...]}, the settings applying to every
 * client (e.g. SASL); then one request per line on stdin, one answer per line on stdout, in order,
 * so one JVM start serves a whole test module.
 *
 * <p>A request is {@code {"op": NAME, ...arguments}}; the answer is {@code {"ok": true, ...}} or,
 * when the client raised, {@code {"ok": false, "error": "<exception class>", "message": "..."}}
 * (the cause of an ExecutionException, as a user of the client would catch it). Keys and values
 * are UTF-8 strings (null allowed), headers a list of [key, value] pairs. Every op builds its own
 * producer or consumer from the client defaults plus the command line's settings plus the
 * request's "config" object, and closes it before answering; admin ops share one Admin client
 * unless the request has a "config" (then one of their own). The named clients (txn_producer,
 * group_consumer, streams_word_count, streams_upper) outlive their op, so a test can step a
 * transaction or a Streams app and kill the broker between steps; "close" ends one. Client logs go
 * to stderr at WARN.
 */
public final class Clients {
    private static final ObjectMapper JSON = new ObjectMapper();
    private final Map<String, String> common = new HashMap<>();
    private Admin admin;
    /** The clients that outlive an op (txn_producer, group_consumer, the Streams apps), by name. */
    private final Map<String, KafkaProducer<String, String>> producers = new HashMap<>();
    private final Map<String, KafkaConsumer<String, String>> consumers = new HashMap<>();
    private final Map<String, KafkaStreams> streams = new HashMap<>();
    private final Map<String, List<String>> streamsErrors = new HashMap<>();

    private Clients(String bootstrap, List<String> settings) {
        common.put("bootstrap.servers", bootstrap);
        for (String setting : settings) {
            int eq = setting.indexOf('=');
            if (eq < 1) {
                throw new IllegalArgumentException("expected name=value, got " + setting);
            }
            common.put(setting.substring(0, eq), setting.substring(eq + 1));
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: chronolog.jvm.Clients <bootstrap host:port> [name=value...]");
            System.exit(2);
        }
        Clients clients = new Clients(args[0], List.of(args).subList(1, args.length));
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                if (!line.isBlank()) {
                    out.println(JSON.writeValueAsString(clients.answer(JSON.readTree(line))));
                }
            }
        } finally {
            clients.streams.values().forEach(k -> k.close(Duration.ofSeconds(10)));
            clients.producers.values().forEach(p -> p.close(Duration.ofSeconds(5)));
            clients.consumers.values().forEach(c -> c.close(Duration.ofSeconds(5)));
            if (clients.admin != null) {
                clients.admin.close(Duration.ofSeconds(5));
            }
        }
    }

    private ObjectNode answer(JsonNode request) {
        ObjectNode answer = JSON.createObjectNode();
        try {
            String op = request.path("op").asText();
            switch (op) {
                case "create_topic" -> createTopic(request);
                case "produce" -> answer.set("records", produce(request));
                case "consume_group" -> consumeGroup(request, answer);
                case "read_partition" -> answer.set("records", readPartition(request));
                case "consumer_offsets" -> consumerOffsets(request, answer);
                case "list_offsets" -> answer.set("offsets", listOffsets(request));
                case "describe_producers" -> answer.set("producers", describeProducers(request));
                case "delete_records" -> answer.set("low_watermarks", deleteRecords(request));
                case "txn_producer" -> txnProducer(request);
                case "txn_begin" -> producer(request).beginTransaction();
                case "txn_send" -> answer.set("records", txnSend(request));
                case "txn_send_offsets" -> txnSendOffsets(request);
                case "txn_commit" -> producer(request).commitTransaction();
                case "txn_abort" -> producer(request).abortTransaction();
                case "group_consumer" -> groupConsumer(request);
                case "poll" -> answer.set("records", poll(request));
                case "rewind" -> answer.set("committed", rewind(request));
                case "streams_word_count" -> streamsWordCount(request);
                case "streams_upper" -> streamsUpper(request);
                case "streams_state" -> streamsState(request, answer);
                case "close" -> close(request);
                default -> throw new IllegalArgumentException("unknown op " + JSON.writeValueAsString(op)
                    + ": see chronolog.jvm.Clients for the ops it serves");
            }
            answer.put("ok", true);
        } catch (Exception e) {
            Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            answer.removeAll();
            answer.put("ok", false);
            answer.put("error", cause.getClass().getName());
            answer.put("message", String.valueOf(cause.getMessage()));
        }
        return answer;
    }

    private Properties config(JsonNode request, Map<String, Object> defaults) {
        Properties props = new Properties();
        props.putAll(defaults);
        props.putAll(common);
        for (Iterator<Map.Entry<String, JsonNode>> it = request.path("config").fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> e = it.next();
            props.put(e.getKey(), e.getValue().asText());
        }
        return props;
    }

    /** An admin op's work, given the Admin client to use. */
    private interface AdminOp<T> {
        T run(Admin admin) throws Exception;
    }

    /** Runs the op with the shared Admin client, or one of its own when the request has a config. */
    private <T> T withAdmin(JsonNode request, AdminOp<T> op) throws Exception {
        if (request.path("config").size() > 0) {
            try (Admin own = Admin.create(config(request, Map.of()))) {
                return op.run(own);
            }
        }
        if (admin == null) {
            admin = Admin.create(config(JSON.createObjectNode(), Map.of()));
        }
        return op.run(admin);
    }

    /** {"topic", "partitions", "configs": {name: value}}. */
    private void createTopic(JsonNode request) throws Exception {
        Map<String, String> configs = new HashMap<>();
        request.path("configs").fields().forEachRemaining(e -> configs.put(e.getKey(), e.getValue().asText()));
        NewTopic topic = new NewTopic(request.path("topic").asText(), request.path("partitions").asInt(1), (short) 1)
            .configs(configs);
        withAdmin(request, a -> a.createTopics(List.of(topic)).all().get());
    }

    /**
     * {"topic", "records": [{"partition"?, "key"?, "value", "timestamp"?, "headers"?}], "flush_every"?,
     * "transaction"?, "config"?}: sends the records in order with one producer (its defaults:
     * idempotent, acks=all), flushing after every "flush_every" records (so batches hold at most
     * that many); answers each record's partition, offset and timestamp as the broker acknowledged
     * them. With "transaction": "commit" or "abort" (and a transactional.id in "config") the sends
     * are one transaction (initTransactions, beginTransaction), flushed, then committed or aborted.
     */
    private ArrayNode produce(JsonNode request) throws Exception {
        String topic = request.path("topic").asText();
        int flushEvery = request.path("flush_every").asInt(0);
        String transaction = request.path("transaction").asText("");
        if (!transaction.isEmpty() && !transaction.equals("commit") && !transaction.equals("abort")) {
            throw new IllegalArgumentException("transaction must be \"commit\" or \"abort\", not " + transaction);
        }
        Properties props = config(request, Map.of(
            ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName(),
            ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName()));
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            if (!transaction.isEmpty()) {
                producer.initTransactions();
                producer.beginTransaction();
            }
            for (JsonNode r : request.path("records")) {
                RecordHeaders headers = new RecordHeaders();
                for (JsonNode h : r.path("headers")) {
                    headers.add(h.get(0).asText(), text(h.get(1)) == null ? null
                        : text(h.get(1)).getBytes(StandardCharsets.UTF_8));
                }
                Integer partition = r.hasNonNull("partition") ? r.get("partition").asInt() : null;
                Long timestamp = r.hasNonNull("timestamp") ? r.get("timestamp").asLong() : null;
                sent.add(producer.send(new ProducerRecord<>(
                    topic, partition, timestamp, text(r.get("key")), text(r.get("value")), headers)));
                if (flushEvery > 0 && sent.size() % flushEvery == 0) {
                    producer.flush();
                }
            }
            producer.flush();
            if (transaction.equals("commit")) {
                producer.commitTransaction();
            } else if (transaction.equals("abort")) {
                producer.abortTransaction();
            }
            ArrayNode acks = JSON.createArrayNode();
            for (Future<RecordMetadata> f : sent) {
                RecordMetadata m = f.get();
                acks.addObject().put("partition", m.partition()).put("offset", m.offset())
                    .put("timestamp", m.timestamp());
            }
            return acks;
        }
    }

    /**
     * {"topic", "group", "count", "timeout_ms"?, "config"?}: a group member subscribed to the
     * topic polls until it has "count" records (or fails after the timeout), commits them
     * synchronously and leaves; answers the records and the group's committed offsets as read back.
     */
    private void consumeGroup(JsonNode request, ObjectNode answer) throws Exception {
        String topic = request.path("topic").asText();
        int count = request.path("count").asInt();
        Properties props = consumerConfig(request);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, request.path("group").asText());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        long deadline = System.currentTimeMillis() + request.path("timeout_ms").asLong(30000);
        ArrayNode records = JSON.createArrayNode();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (records.size() < count) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("group " + request.path("group").asText() + " read "
                        + records.size() + " of " + count + " records from " + topic + " before the timeout");
                }
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    records.add(record(r));
                }
            }
            consumer.commitSync();
            ObjectNode committed = JSON.createObjectNode();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : consumer.committed(consumer.assignment()).entrySet()) {
                committed.put(String.valueOf(e.getKey().partition()), e.getValue() == null ? null : e.getValue().offset());
            }
            answer.set("records", records);
            answer.set("committed", committed);
        }
    }

    /** {"topic", "partition"}: every record from the beginning to the end offset, without a group. */
    private ArrayNode readPartition(JsonNode request) {
        TopicPartition tp = new TopicPartition(request.path("topic").asText(), request.path("partition").asInt());
        ArrayNode records = JSON.createArrayNode();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerConfig(request))) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            while (consumer.position(tp) < end) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    records.add(record(r));
                }
            }
        }
        return records;
    }

    /**
     * {"topic", "partitions": [p...], "timestamps": [t...]}: the consumer's beginningOffsets and
     * endOffsets of the partitions, and offsetsForTimes of every timestamp on every partition
     * ("for_times": {partition: [{"offset", "timestamp", "leader_epoch"} or null per timestamp]}).
     */
    private void consumerOffsets(JsonNode request, ObjectNode answer) {
        String topic = request.path("topic").asText();
        List<TopicPartition> tps = new ArrayList<>();
        request.path("partitions").forEach(p -> tps.add(new TopicPartition(topic, p.asInt())));
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerConfig(request))) {
            ObjectNode beginning = answer.putObject("beginning");
            consumer.beginningOffsets(tps).forEach((tp, o) -> beginning.put(String.valueOf(tp.partition()), o));
            ObjectNode end = answer.putObject("end");
            consumer.endOffsets(tps).forEach((tp, o) -> end.put(String.valueOf(tp.partition()), o));
            ObjectNode forTimes = answer.putObject("for_times");
            for (TopicPartition tp : tps) {
                ArrayNode found = forTimes.putArray(String.valueOf(tp.partition()));
                for (JsonNode t : request.path("timestamps")) {
                    OffsetAndTimestamp ot = consumer.offsetsForTimes(Map.of(tp, t.asLong())).get(tp);
                    if (ot == null) {
                        found.addNull();
                    } else {
                        found.addObject().put("offset", ot.offset()).put("timestamp", ot.timestamp())
                            .put("leader_epoch", ot.leaderEpoch().orElse(-1));
                    }
                }
            }
        }
    }

    /**
     * {"topic", "queries": [[partition, spec]...], "isolation"?} with spec "earliest", "latest",
     * "max_timestamp" or a timestamp, isolation "read_uncommitted" (the default) or "read_committed"
     * (latest is then the last stable offset): Admin.listOffsets, one answer {"offset", "timestamp", "leader_epoch"} per
     * query in order (offset -1 when no record qualifies, as the Admin client reports it).
     */
    private ArrayNode listOffsets(JsonNode request) throws Exception {
        String topic = request.path("topic").asText();
        ListOffsetsOptions options = new ListOffsetsOptions(
            IsolationLevel.valueOf(request.path("isolation").asText("read_uncommitted").toUpperCase(Locale.ROOT)));
        return withAdmin(request, a -> {
            ArrayNode answers = JSON.createArrayNode();
            for (JsonNode q : request.path("queries")) {
                TopicPartition tp = new TopicPartition(topic, q.get(0).asInt());
                ListOffsetsResultInfo info = a.listOffsets(Map.of(tp, offsetSpec(q.get(1))), options)
                    .partitionResult(tp).get();
                answers.addObject().put("offset", info.offset()).put("timestamp", info.timestamp())
                    .put("leader_epoch", info.leaderEpoch().orElse(-1));
            }
            return answers;
        });
    }

    private static OffsetSpec offsetSpec(JsonNode spec) {
        return switch (spec.asText()) {
            case "earliest" -> OffsetSpec.earliest();
            case "latest" -> OffsetSpec.latest();
            case "max_timestamp" -> OffsetSpec.maxTimestamp();
            default -> {
                if (!spec.canConvertToLong()) {
                    throw new IllegalArgumentException("unknown offset spec " + spec);
                }
                yield OffsetSpec.forTimestamp(spec.asLong());
            }
        };
    }

    /**
     * {"topic", "before": {partition: offset}}: Admin.deleteRecords; answers each partition's low
     * watermark (its new log start offset) as the broker reported it.
     */
    private ObjectNode deleteRecords(JsonNode request) throws Exception {
        String topic = request.path("topic").asText();
        Map<TopicPartition, RecordsToDelete> before = new HashMap<>();
        request.path("before").fields().forEachRemaining(e -> before.put(
            new TopicPartition(topic, Integer.parseInt(e.getKey())), RecordsToDelete.beforeOffset(e.getValue().asLong())));
        return withAdmin(request, a -> {
            ObjectNode lows = JSON.createObjectNode();
            for (Map.Entry<TopicPartition, KafkaFuture<DeletedRecords>> e
                    : a.deleteRecords(before).lowWatermarks().entrySet()) {
                lows.put(String.valueOf(e.getKey().partition()), e.getValue().get().lowWatermark());
            }
            return lows;
        });
    }

    /** {"topic", "partition"}: Admin.describeProducers, the active producers of the partition. */
    private ArrayNode describeProducers(JsonNode request) throws Exception {
        TopicPartition tp = new TopicPartition(request.path("topic").asText(), request.path("partition").asInt());
        PartitionProducerState state = withAdmin(request, a -> a.describeProducers(List.of(tp)).partitionResult(tp).get());
        ArrayNode producers = JSON.createArrayNode();
        for (ProducerState p : state.activeProducers()) {
            producers.addObject().put("producer_id", p.producerId()).put("producer_epoch", p.producerEpoch())
                .put("last_sequence", p.lastSequence()).put("last_timestamp", p.lastTimestamp());
        }
        return producers;
    }

    // Clients that outlive an op: a test drives them step by step (and kills the broker between
    // steps). Each is named by the request's "name"; "close" closes it.

    private KafkaProducer<String, String> producer(JsonNode request) {
        KafkaProducer<String, String> producer = producers.get(request.path("name").asText());
        if (producer == null) {
            throw new IllegalArgumentException("no producer named " + request.path("name") + ": open it with txn_producer");
        }
        return producer;
    }

    private KafkaConsumer<String, String> consumer(JsonNode request, String key) {
        KafkaConsumer<String, String> consumer = consumers.get(request.path(key).asText());
        if (consumer == null) {
            throw new IllegalArgumentException("no consumer named " + request.path(key) + ": open it with group_consumer");
        }
        return consumer;
    }

    /** {"name", "transactional_id", "config"?}: a transactional producer, initTransactions done. */
    private void txnProducer(JsonNode request) {
        Properties props = config(request, Map.of(
            ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName(),
            ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName()));
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, request.path("transactional_id").asText());
        KafkaProducer<String, String> producer = new KafkaProducer<>(props);
        try {
            producer.initTransactions();
        } catch (RuntimeException e) {
            producer.close(Duration.ZERO);
            throw e;
        }
        close(request);
        producers.put(request.path("name").asText(), producer);
    }

    /**
     * {"name", "topic", "records": [{"partition"?, "key"?, "value"}]}: sends the records in the
     * producer's open transaction and flushes; answers each record's partition and offset.
     */
    private ArrayNode txnSend(JsonNode request) throws Exception {
        KafkaProducer<String, String> producer = producer(request);
        String topic = request.path("topic").asText();
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        for (JsonNode r : request.path("records")) {
            Integer partition = r.hasNonNull("partition") ? r.get("partition").asInt() : null;
            sent.add(producer.send(new ProducerRecord<>(topic, partition, text(r.get("key")), text(r.get("value")))));
        }
        producer.flush();
        ArrayNode acks = JSON.createArrayNode();
        for (Future<RecordMetadata> f : sent) {
            RecordMetadata m = f.get();
            acks.addObject().put("partition", m.partition()).put("offset", m.offset());
        }
        return acks;
    }

    /**
     * {"name", "consumer"}: sendOffsetsToTransaction of the consumer's positions on its assignment,
     * with its group metadata (KIP-447 fencing), in the producer's open transaction.
     */
    private void txnSendOffsets(JsonNode request) {
        KafkaConsumer<String, String> consumer = consumer(request, "consumer");
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : consumer.assignment()) {
            offsets.put(tp, new OffsetAndMetadata(consumer.position(tp)));
        }
        producer(request).sendOffsetsToTransaction(offsets, consumer.groupMetadata());
    }

    /**
     * {"name", "topic", "group", "config"?}: a group member subscribed to the topic, offsets
     * committed only through a transaction (enable.auto.commit=false), read_committed.
     */
    private void groupConsumer(JsonNode request) {
        Properties props = consumerConfig(request);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, request.path("group").asText());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.putIfAbsent(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props);
        consumer.subscribe(List.of(request.path("topic").asText()));
        close(request);
        consumers.put(request.path("name").asText(), consumer);
    }

    /** {"name", "timeout_ms"?}: polls until a poll returns records or the timeout passes; answers them. */
    private ArrayNode poll(JsonNode request) {
        KafkaConsumer<String, String> consumer = consumer(request, "name");
        long deadline = System.currentTimeMillis() + request.path("timeout_ms").asLong(5000);
        ArrayNode records = JSON.createArrayNode();
        do {
            ConsumerRecords<String, String> polled = consumer.poll(Duration.ofMillis(100));
            polled.forEach(r -> records.add(record(r)));
        } while (records.isEmpty() && System.currentTimeMillis() < deadline);
        return records;
    }

    /**
     * {"name"}: seeks the consumer back to its group's committed offsets (the start where none) on
     * its assignment; answers them ({partition: offset}, 0 where none).
     */
    private ObjectNode rewind(JsonNode request) {
        KafkaConsumer<String, String> consumer = consumer(request, "name");
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(consumer.assignment());
        ObjectNode offsets = JSON.createObjectNode();
        for (TopicPartition tp : consumer.assignment()) {
            OffsetAndMetadata o = committed.get(tp);
            if (o == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, o.offset());
            }
            offsets.put(String.valueOf(tp.partition()), o == null ? 0 : o.offset());
        }
        return offsets;
    }

    /**
     * {"name", "application_id", "input", "output", "config"?}: starts a Kafka Streams word count:
     * lines of "input" split on spaces, grouped by word (a repartition topic), counted in a state
     * store (its changelog topic), each new count written to "output" as the word and its count in
     * decimal. The request's config adds to the Streams settings (e.g. processing.guarantee).
     */
    private void streamsWordCount(JsonNode request) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(request.path("input").asText())
            .flatMapValues(line -> List.of(line.split(" ")))
            .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .mapValues(count -> String.valueOf(count))
            .to(request.path("output").asText(), Produced.with(Serdes.String(), Serdes.String()));
        startStreams(request, builder);
    }

    /**
     * {"name", "application_id", "input", "output", "config"?}: starts a stateless Kafka Streams
     * app writing each record of "input" to "output" with its key and its value upper-cased.
     */
    private void streamsUpper(JsonNode request) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(request.path("input").asText())
            .mapValues(value -> value == null ? null : value.toUpperCase(java.util.Locale.ROOT))
            .to(request.path("output").asText(), Produced.with(Serdes.String(), Serdes.String()));
        startStreams(request, builder);
    }

    /**
     * Starts the topology under the request's name (closing an app of that name first), with
     * string serdes and the request's application_id and config. An uncaught exception is kept
     * for streams_state and replaces the thread, as a service would.
     */
    private void startStreams(JsonNode request, StreamsBuilder builder) {
        String name = request.path("name").asText();
        Properties props = config(request, Map.of(
            StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName(),
            StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName()));
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, request.path("application_id").asText());
        KafkaStreams app = new KafkaStreams(builder.build(), props);
        List<String> errors = java.util.Collections.synchronizedList(new ArrayList<>());
        app.setUncaughtExceptionHandler(e -> {
            errors.add(e.getClass().getName() + ": " + e.getMessage()
                + (e.getCause() == null ? "" : " (caused by " + e.getCause().getClass().getName() + ": "
                + e.getCause().getMessage() + ")"));
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        close(request);
        streams.put(name, app);
        streamsErrors.put(name, errors);
        app.start();
    }

    /** {"name"}: the Streams app's state (RUNNING, REBALANCING, ERROR...) and its uncaught exceptions. */
    private void streamsState(JsonNode request, ObjectNode answer) {
        String name = request.path("name").asText();
        KafkaStreams app = streams.get(name);
        if (app == null) {
            throw new IllegalArgumentException("no Streams app named " + request.path("name"));
        }
        answer.put("state", app.state().name());
        ArrayNode errors = answer.putArray("errors");
        synchronized (streamsErrors.get(name)) {
            streamsErrors.get(name).forEach(errors::add);
        }
    }

    /** {"name"}: closes the producer, consumer or Streams app of that name, if any. */
    private void close(JsonNode request) {
        String name = request.path("name").asText();
        KafkaProducer<String, String> producer = producers.remove(name);
        if (producer != null) {
            producer.close(Duration.ofSeconds(5));
        }
        KafkaConsumer<String, String> consumer = consumers.remove(name);
        if (consumer != null) {
            consumer.close(Duration.ofSeconds(5));
        }
        KafkaStreams app = streams.remove(name);
        if (app != null) {
            app.close(Duration.ofSeconds(30));
            streamsErrors.remove(name);
        }
    }

    private Properties consumerConfig(JsonNode request) {
        return config(request, Map.of(
            ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName(),
            ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName(),
            ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest"));
    }

    private static ObjectNode record(ConsumerRecord<String, String> r) {
        ObjectNode node = JSON.createObjectNode();
        node.put("partition", r.partition()).put("offset", r.offset()).put("timestamp", r.timestamp())
            .put("timestamp_type", r.timestampType().name).put("key", r.key()).put("value", r.value());
        ArrayNode headers = node.putArray("headers");
        for (Header h : r.headers()) {
            headers.addArray().add(h.key()).add(h.value() == null ? null : new String(h.value(), StandardCharsets.UTF_8));
        }
        return node;
    }

    private static String text(JsonNode node) {
        return node == null || node.isNull() ? null : node.asText();
    }
}

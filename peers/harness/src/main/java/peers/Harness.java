package peers;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * RocketMQ's official Java clients, driven from Python (peers/rocketmq.py): each command prints
 * one JSON line of results. Bodies are "m-<index>" padded with 'x' to --body-bytes, so both sides
 * can check every message by a digest of the sorted bodies.
 *
 * produce      --namesrv H:P --topic T --messages N [--threads K] [--body-bytes B] [--tag TAG]
 *              [--batch-delay-ms D]
 *              DefaultMQProducer (remoting) with autoBatch on (a batch waits D ms for more, 10
 *              unless told), async sends, K threads.
 * pull         --namesrv H:P --topic T --expect N [--timeout-s S] [--digest false]
 *              DefaultLitePullConsumer, a group of its own each time (a group's committed
 *              offsets would start the next read where this one ended): every queue from its
 *              beginning until N messages;
 *              "seconds" from the assignment to the Nth message; --digest false: the bodies are
 *              counted, not kept (no digest), for reads larger than the JVM's heap.
 * grpc-produce --endpoint H:P --topic T --messages N [--body-bytes B] [--tls true]   (rocketmq-client-java)
 * grpc-consume --endpoint H:P --topic T --group G --expect N [--timeout-s S] [--tls true]   (SimpleConsumer)
 *              --tls true: enableSsl (the client trusts any certificate of the endpoint).
 * push         --namesrv H:P --topic T --group G --messages N [--orderly true] [--timeout-s S]
 *              DefaultMQProducer sends N, then DefaultMQPushConsumer (clustering) receives them;
 *              message 3 fails once (RECONSUME_LATER at delay level 1, concurrently: back through the
 *              retry topic).
 * transaction  --namesrv H:P --topic T [--timeout-s S]
 *              TransactionMQProducer: one commit, one rollback, one UNKNOW that the check commits;
 *              then a lite pull reads what became visible.
 * sends        --namesrv H:P --topic T
 *              sync, oneway, to a chosen queue, a batch, with tags / keys / a property; then
 *              what a lite pull of each queue returns, min / max offsets, offsets by time, a
 *              committed offset read back, the message viewed by id.
 * mqadmin      CMD ARGS... [--- CMD ARGS...]...
 *              RocketMQ's mqadmin commands in one JVM (one start instead of one per command);
 *              each command's output follows a line "=== mqadmin CMD".
 */
public final class Harness {
    public static void main(String[] argv) throws Exception {
        if (argv[0].equals("mqadmin")) {
            mqadmin(java.util.Arrays.copyOfRange(argv, 1, argv.length));
            System.exit(0);
        }
        Map<String, String> a = options(argv);
        switch (argv[0]) {
            case "produce" -> produce(a);
            case "pull" -> pull(a);
            case "grpc-produce" -> grpcProduce(a);
            case "grpc-consume" -> grpcConsume(a);
            case "push" -> push(a);
            case "transaction" -> transaction(a);
            case "sends" -> sends(a);
            default -> throw new IllegalArgumentException("unknown command " + argv[0]);
        }
        System.exit(0);  // the clients' non-daemon threads would keep the JVM alive
    }

    static void mqadmin(String[] argv) {
        List<String> command = new ArrayList<>();
        for (int i = 0; i <= argv.length; i++) {
            if (i < argv.length && !argv[i].equals("---")) {
                command.add(argv[i]);
                continue;
            }
            System.out.println("=== mqadmin " + command.get(0));
            System.out.flush();
            org.apache.rocketmq.tools.command.MQAdminStartup.main0(command.toArray(new String[0]), null);
            System.out.flush();
            command.clear();
        }
    }

    static Map<String, String> options(String[] argv) {
        Map<String, String> out = new HashMap<>();
        for (int i = 1; i + 1 < argv.length; i += 2) {
            out.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        return out;
    }

    static byte[] body(int index, int size) {
        byte[] head = ("m-" + index).getBytes(StandardCharsets.UTF_8);
        byte[] out = new byte[Math.max(size, head.length)];
        java.util.Arrays.fill(out, (byte) 'x');
        System.arraycopy(head, 0, out, 0, head.length);
        return out;
    }

    static void produce(Map<String, String> a) throws Exception {
        int messages = Integer.parseInt(a.get("messages"));
        int threads = Integer.parseInt(a.getOrDefault("threads", "4"));
        int size = Integer.parseInt(a.getOrDefault("body-bytes", "1024"));
        String topic = a.get("topic");
        String tag = a.getOrDefault("tag", "");
        DefaultMQProducer producer = new DefaultMQProducer("harness-producer");
        producer.setNamesrvAddr(a.get("namesrv"));
        producer.setAutoBatch(true);
        producer.batchMaxDelayMs(Integer.parseInt(a.getOrDefault("batch-delay-ms", "10")));
        producer.batchMaxBytes(32 * 1024);
        producer.setSendMsgTimeout(30_000);
        producer.start();
        Semaphore inFlight = new Semaphore(4096);
        CountDownLatch done = new CountDownLatch(messages);
        AtomicLong failed = new AtomicLong();
        AtomicReference<Throwable> firstError = new AtomicReference<>();
        long started = System.nanoTime();
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int first = t;
            Thread worker = new Thread(() -> {
                for (int i = first; i < messages; i += threads) {
                    Message message = new Message(topic, tag.isEmpty() ? null : tag, body(i, size));
                    try {
                        inFlight.acquire();
                        producer.send(message, new SendCallback() {
                            public void onSuccess(SendResult result) { inFlight.release(); done.countDown(); }
                            public void onException(Throwable e) {
                                firstError.compareAndSet(null, e);
                                failed.incrementAndGet();
                                inFlight.release();
                                done.countDown();
                            }
                        });
                    } catch (Exception e) {
                        firstError.compareAndSet(null, e);
                        failed.incrementAndGet();
                        inFlight.release();
                        done.countDown();
                    }
                }
            });
            worker.start();
            workers.add(worker);
        }
        for (Thread worker : workers) worker.join();
        boolean all = done.await(300, TimeUnit.SECONDS);
        double seconds = (System.nanoTime() - started) / 1e9;
        producer.shutdown();
        Throwable error = firstError.get();
        System.out.printf("{\"sent\": %d, \"failed\": %d, \"complete\": %b, \"seconds\": %.3f, \"msgs_per_s\": %.1f, "
                + "\"error\": \"%s\"}%n", messages - failed.get(), failed.get(), all, seconds,
                (messages - failed.get()) / seconds, error == null ? "" : json(error.toString()));
    }

    static void pull(Map<String, String> a) throws Exception {
        long expect = Long.parseLong(a.get("expect"));
        long timeoutMs = (long) (Double.parseDouble(a.getOrDefault("timeout-s", "60")) * 1000);
        DefaultLitePullConsumer consumer = fromFirstOffset("harness-pull-" + a.get("topic") + "-" + System.nanoTime(), a.get("namesrv"));
        consumer.setPullBatchSize(256);
        consumer.start();
        Collection<MessageQueue> queues = consumer.fetchMessageQueues(a.get("topic"));
        boolean keep = Boolean.parseBoolean(a.getOrDefault("digest", "true"));
        long began = System.nanoTime();
        consumer.assign(queues);
        List<String> bodies = new ArrayList<>();
        long received = 0;
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (received < expect && System.currentTimeMillis() < deadline) {
            for (MessageExt message : consumer.poll(500)) {
                received++;
                if (keep) {
                    bodies.add(new String(message.getBody(), StandardCharsets.UTF_8));
                }
            }
        }
        double seconds = (System.nanoTime() - began) / 1e9;
        System.out.printf("{\"received\": %d, \"queues\": %d, \"seconds\": %.3f, \"digest\": \"%s\"}%n",
                received, queues.size(), seconds, keep ? digest(bodies) : "");
        System.out.flush();  // before the shutdown, which may wait for long polls
        consumer.shutdown();
    }

    /**
     * A lite pull consumer of a group of its own that reads every assigned queue from its first
     * offset. (Assigning, then seeking to the beginning, races: the pulls started by the
     * assignment may deliver messages that the seek then delivers again.)
     */
    static DefaultLitePullConsumer fromFirstOffset(String group, String namesrv) {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(org.apache.rocketmq.common.consumer.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        return consumer;
    }

    static DefaultMQProducer producer(Map<String, String> a, String group) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(a.get("namesrv"));
        producer.setSendMsgTimeout(30_000);
        producer.start();
        return producer;
    }

    static void push(Map<String, String> a) throws Exception {
        String topic = a.get("topic");
        int messages = Integer.parseInt(a.get("messages"));
        boolean orderly = Boolean.parseBoolean(a.getOrDefault("orderly", "false"));
        long timeoutMs = (long) (Double.parseDouble(a.getOrDefault("timeout-s", "90")) * 1000);
        DefaultMQProducer producer = producer(a, a.get("group") + "-producer");
        for (int i = 0; i < messages; i++) {
            Message message = new Message(topic, "TagA", body(i, 16));
            if (orderly) {
                producer.send(message, (queues, msg, arg) -> queues.get(0), null);
            } else {
                producer.send(message);
            }
        }
        producer.shutdown();
        List<String> received = java.util.Collections.synchronizedList(new ArrayList<>());
        AtomicLong retried = new AtomicLong();
        org.apache.rocketmq.client.consumer.DefaultMQPushConsumer consumer =
                new org.apache.rocketmq.client.consumer.DefaultMQPushConsumer(a.get("group"));
        consumer.setNamesrvAddr(a.get("namesrv"));
        consumer.setConsumeFromWhere(org.apache.rocketmq.common.consumer.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPollNameServerInterval(1000);
        consumer.subscribe(topic, "*");
        if (orderly) {
            consumer.registerMessageListener((org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly)
                    (msgs, context) -> {
                        for (MessageExt m : msgs) received.add(new String(m.getBody(), StandardCharsets.UTF_8));
                        return org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus.SUCCESS;
                    });
        } else {
            consumer.registerMessageListener((org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently)
                    (msgs, context) -> {
                        for (MessageExt m : msgs) {
                            String text = new String(m.getBody(), StandardCharsets.UTF_8);
                            if (text.startsWith("m-3x") && m.getReconsumeTimes() == 0) {
                                context.setDelayLevelWhenNextConsume(1);  // back in 1 s, not level 3's 10 s
                                return org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus.RECONSUME_LATER;
                            }
                            if (m.getReconsumeTimes() > 0) retried.incrementAndGet();
                            received.add(text);
                        }
                        return org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                    });
        }
        consumer.start();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (received.size() < messages && System.currentTimeMillis() < deadline) Thread.sleep(100);
        Thread.sleep(500);
        consumer.shutdown();
        List<String> copy = new ArrayList<>(received);
        boolean inOrder = true;
        for (int i = 1; i < copy.size(); i++) {
            inOrder &= Integer.parseInt(copy.get(i).replaceAll("^m-(\\d+).*", "$1"))
                    > Integer.parseInt(copy.get(i - 1).replaceAll("^m-(\\d+).*", "$1"));
        }
        System.out.printf("{\"received\": %d, \"distinct\": %d, \"retried\": %d, \"in_order\": %b, \"digest\": \"%s\"}%n",
                copy.size(), new java.util.HashSet<>(copy).size(), retried.get(), inOrder, digest(copy));
    }

    static void transaction(Map<String, String> a) throws Exception {
        String topic = a.get("topic");
        long timeoutMs = (long) (Double.parseDouble(a.getOrDefault("timeout-s", "90")) * 1000);
        AtomicLong checks = new AtomicLong();
        org.apache.rocketmq.client.producer.TransactionMQProducer producer =
                new org.apache.rocketmq.client.producer.TransactionMQProducer("harness-tx-" + topic);
        producer.setNamesrvAddr(a.get("namesrv"));
        producer.setTransactionListener(new org.apache.rocketmq.client.producer.TransactionListener() {
            public org.apache.rocketmq.client.producer.LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return switch (new String(msg.getBody(), StandardCharsets.UTF_8)) {
                    case "commit" -> org.apache.rocketmq.client.producer.LocalTransactionState.COMMIT_MESSAGE;
                    case "rollback" -> org.apache.rocketmq.client.producer.LocalTransactionState.ROLLBACK_MESSAGE;
                    default -> org.apache.rocketmq.client.producer.LocalTransactionState.UNKNOW;
                };
            }
            public org.apache.rocketmq.client.producer.LocalTransactionState checkLocalTransaction(MessageExt msg) {
                checks.incrementAndGet();  // the local transaction's state now: only "unknown" was undecided
                return "rollback".equals(new String(msg.getBody(), StandardCharsets.UTF_8))
                        ? org.apache.rocketmq.client.producer.LocalTransactionState.ROLLBACK_MESSAGE
                        : org.apache.rocketmq.client.producer.LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.start();
        List<String> states = new ArrayList<>();
        for (String body : new String[] {"commit", "rollback", "unknown"}) {
            states.add(producer.sendMessageInTransaction(new Message(topic, body.getBytes(StandardCharsets.UTF_8)), null)
                    .getLocalTransactionState().name());
        }
        DefaultLitePullConsumer consumer = fromFirstOffset("harness-tx-pull-" + topic, a.get("namesrv"));
        consumer.start();
        consumer.assign(consumer.fetchMessageQueues(topic));
        List<String> visible = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!(visible.contains("commit") && visible.contains("unknown")) && System.currentTimeMillis() < deadline) {
            for (MessageExt m : consumer.poll(500)) visible.add(new String(m.getBody(), StandardCharsets.UTF_8));
        }
        for (int i = 0; i < 4; i++) {  // nothing more comes (the rollback stays invisible)
            for (MessageExt m : consumer.poll(500)) visible.add(new String(m.getBody(), StandardCharsets.UTF_8));
        }
        java.util.Collections.sort(visible);
        System.out.printf("{\"states\": \"%s\", \"visible\": \"%s\", \"checked\": %b}%n",
                String.join(",", states), String.join(",", visible), checks.get() > 0);
        System.out.flush();
        consumer.shutdown();
        producer.shutdown();
    }

    static void sends(Map<String, String> a) throws Exception {
        String topic = a.get("topic");
        DefaultMQProducer producer = producer(a, "harness-sends-" + topic);
        long before = System.currentTimeMillis() - 1;
        List<String> out = new ArrayList<>();
        Message sync = new Message(topic, "TagA", "k1 k2", "sync".getBytes(StandardCharsets.UTF_8));
        sync.putUserProperty("color", "red");
        SendResult syncResult = producer.send(sync, new MessageQueue(topic, producer.fetchPublishMessageQueues(topic)
                .get(0).getBrokerName(), 0));
        out.add("\"sync\": {\"status\": \"" + syncResult.getSendStatus() + "\", \"queue\": "
                + syncResult.getMessageQueue().getQueueId() + ", \"offset\": " + syncResult.getQueueOffset() + "}");
        MessageQueue second = new MessageQueue(topic, syncResult.getMessageQueue().getBrokerName(), 1);
        producer.sendOneway(new Message(topic, "TagB", "oneway".getBytes(StandardCharsets.UTF_8)), second);
        // A oneway send has no answer, and RocketMQ's broker stores sends in a pool of threads:
        // the batch that follows could be stored first. The batch is sent once the oneway is.
        long stored = System.currentTimeMillis() + 30_000;
        while (producer.maxOffset(second) < 1 && System.currentTimeMillis() < stored) Thread.sleep(20);
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 3; i++) batch.add(new Message(topic, "TagC", ("batch-" + i).getBytes(StandardCharsets.UTF_8)));
        SendResult batchResult = producer.send(batch, second);
        out.add("\"batch\": {\"status\": \"" + batchResult.getSendStatus() + "\", \"offset\": "
                + batchResult.getQueueOffset() + "}");
        org.apache.rocketmq.tools.admin.DefaultMQAdminExt admin = new org.apache.rocketmq.tools.admin.DefaultMQAdminExt();
        admin.setNamesrvAddr(a.get("namesrv"));
        admin.start();
        MessageExt viewed = admin.viewMessage(topic, syncResult.getOffsetMsgId());
        out.add("\"viewed\": {\"body\": \"" + new String(viewed.getBody(), StandardCharsets.UTF_8) + "\", \"tags\": \""
                + viewed.getTags() + "\", \"keys\": \"" + viewed.getKeys() + "\", \"color\": \""
                + viewed.getUserProperty("color") + "\"}");
        DefaultLitePullConsumer consumer = fromFirstOffset("harness-sends-pull-" + topic, a.get("namesrv"));
        consumer.setAutoCommit(false);
        consumer.start();
        List<MessageQueue> queues = new ArrayList<>(consumer.fetchMessageQueues(topic));
        queues.sort(java.util.Comparator.comparingInt(MessageQueue::getQueueId));
        consumer.assign(queues);
        List<String> pulled = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 30_000;
        while (pulled.size() < 5 && System.currentTimeMillis() < deadline) {
            for (MessageExt m : consumer.poll(500)) {
                pulled.add("\"" + m.getQueueId() + "/" + m.getQueueOffset() + "/" + m.getTags() + "/"
                        + new String(m.getBody(), StandardCharsets.UTF_8) + "\"");
            }
        }
        java.util.Collections.sort(pulled);
        out.add("\"pulled\": [" + String.join(", ", pulled) + "]");
        MessageQueue q1 = queues.get(1);
        out.add("\"q1\": {\"min\": " + admin.minOffset(q1) + ", \"max\": " + admin.maxOffset(q1)
                + ", \"by_time_before\": " + admin.searchOffset(q1, before)
                + ", \"by_time_after\": " + admin.searchOffset(q1, System.currentTimeMillis() + 60_000) + "}");
        consumer.seek(q1, 2);
        consumer.commit(java.util.Map.of(q1, 2L), true);
        out.add("\"committed\": " + consumer.committed(q1));
        System.out.println("{" + String.join(", ", out) + "}");
        System.out.flush();
        consumer.shutdown();
        admin.shutdown();
        producer.shutdown();
    }

    static void grpcProduce(Map<String, String> a) throws Exception {
        int messages = Integer.parseInt(a.get("messages"));
        int size = Integer.parseInt(a.getOrDefault("body-bytes", "1024"));
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder().setEndpoints(a.get("endpoint"))
                .enableSsl(tls(a)).setRequestTimeout(Duration.ofSeconds(30)).build();
        long started = System.nanoTime();
        try (Producer producer = provider.newProducerBuilder().setClientConfiguration(config)
                .setTopics(a.get("topic")).build()) {
            for (int i = 0; i < messages; i++) {
                producer.send(provider.newMessageBuilder().setTopic(a.get("topic")).setBody(body(i, size)).build());
            }
        }
        double seconds = (System.nanoTime() - started) / 1e9;
        System.out.printf("{\"sent\": %d, \"seconds\": %.3f, \"msgs_per_s\": %.1f}%n", messages, seconds,
                messages / seconds);
    }

    static void grpcConsume(Map<String, String> a) throws Exception {
        long expect = Long.parseLong(a.get("expect"));
        long timeoutMs = (long) (Double.parseDouble(a.getOrDefault("timeout-s", "60")) * 1000);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder().setEndpoints(a.get("endpoint"))
                .enableSsl(tls(a)).setRequestTimeout(Duration.ofSeconds(30)).build();
        List<String> bodies = new ArrayList<>();
        try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder().setClientConfiguration(config)
                .setConsumerGroup(a.get("group")).setAwaitDuration(Duration.ofSeconds(2))
                .setSubscriptionExpressions(Map.of(a.get("topic"), FilterExpression.SUB_ALL)).build()) {
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (bodies.size() < expect && System.currentTimeMillis() < deadline) {
                for (MessageView view : consumer.receive(32, Duration.ofSeconds(30))) {
                    bodies.add(StandardCharsets.UTF_8.decode(view.getBody()).toString());
                    consumer.ack(view);
                }
            }
        }
        System.out.printf("{\"received\": %d, \"digest\": \"%s\"}%n", bodies.size(), digest(bodies));
    }

    static boolean tls(Map<String, String> a) {
        return Boolean.parseBoolean(a.getOrDefault("tls", "false"));
    }

    static String digest(List<String> bodies) throws Exception {
        List<String> sorted = new ArrayList<>(bodies);
        java.util.Collections.sort(sorted);
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        for (String body : sorted) {
            sha.update(body.getBytes(StandardCharsets.UTF_8));
            sha.update((byte) '\n');
        }
        return HexFormat.of().formatHex(sha.digest());
    }

    static String json(String text) {
        return text.replace("\\", "\\\\").replace("\"", "'").replace("\n", " ");
    }
}

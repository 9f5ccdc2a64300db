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
 *              DefaultMQProducer (remoting) with autoBatch on, async sends, K threads.
 * pull         --namesrv H:P --topic T --expect N [--timeout-s S]
 *              DefaultLitePullConsumer: every queue from its beginning until N messages.
 * grpc-produce --endpoint H:P --topic T --messages N [--body-bytes B]   (rocketmq-client-java)
 * grpc-consume --endpoint H:P --topic T --group G --expect N [--timeout-s S]   (SimpleConsumer)
 */
public final class Harness {
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = options(argv);
        switch (argv[0]) {
            case "produce" -> produce(a);
            case "pull" -> pull(a);
            case "grpc-produce" -> grpcProduce(a);
            case "grpc-consume" -> grpcConsume(a);
            default -> throw new IllegalArgumentException("unknown command " + argv[0]);
        }
        System.exit(0);  // the clients' non-daemon threads would keep the JVM alive
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
        producer.batchMaxDelayMs(10);
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
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer("harness-pull");
        consumer.setNamesrvAddr(a.get("namesrv"));
        consumer.setPullBatchSize(256);
        consumer.start();
        Collection<MessageQueue> queues = consumer.fetchMessageQueues(a.get("topic"));
        consumer.assign(queues);
        for (MessageQueue queue : queues) consumer.seekToBegin(queue);
        List<String> bodies = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (bodies.size() < expect && System.currentTimeMillis() < deadline) {
            for (MessageExt message : consumer.poll(500)) {
                bodies.add(new String(message.getBody(), StandardCharsets.UTF_8));
            }
        }
        consumer.shutdown();
        System.out.printf("{\"received\": %d, \"queues\": %d, \"digest\": \"%s\"}%n", bodies.size(), queues.size(),
                digest(bodies));
    }

    static void grpcProduce(Map<String, String> a) throws Exception {
        int messages = Integer.parseInt(a.get("messages"));
        int size = Integer.parseInt(a.getOrDefault("body-bytes", "1024"));
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder().setEndpoints(a.get("endpoint"))
                .enableSsl(false).setRequestTimeout(Duration.ofSeconds(30)).build();
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
                .enableSsl(false).setRequestTimeout(Duration.ofSeconds(30)).build();
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

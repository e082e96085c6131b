// HttpProduceProxy: an HTTP produce proxy without fencing, in the shape of
// the Strimzi Kafka Bridge's producer endpoint (POST /topics/{topic},
// body {"records":[{"key":"...","value":...,"partition":n}]}, the reply
// the offsets once Kafka acknowledged every record). It stands in for the
// bridge, which Maven Central did not serve (deploy/bench/apache.sh), with
// the bridge's own client: Apache Kafka's Java producer (kafka-clients,
// idempotent, acks=all), no transactions, no stamps, no leases.
//
//   java -cp "$FENCEGATE_KAFKA_HOME/lib/*" HttpProduceProxy.java PORT BROKERS
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class HttpProduceProxy {
  static final ObjectMapper JSON = new ObjectMapper();

  public static void main(String[] args) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", args[1]);
    p.put("acks", "all");
    p.put("key.serializer", ByteArraySerializer.class.getName());
    p.put("value.serializer", ByteArraySerializer.class.getName());
    KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
    HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", Integer.parseInt(args[0])), 1024);
    server.setExecutor(Executors.newFixedThreadPool(128));
    server.createContext("/topics/", ex -> {
      try {
        handle(producer, ex);
      } catch (Exception e) {
        byte[] b = ("{\"error_code\":500,\"message\":\"" + e.getMessage() + "\"}").getBytes(StandardCharsets.UTF_8);
        ex.sendResponseHeaders(500, b.length);
        try (OutputStream o = ex.getResponseBody()) { o.write(b); }
      }
    });
    server.start();
    System.out.println("ready " + args[0]);
  }

  static void handle(KafkaProducer<byte[], byte[]> producer, HttpExchange ex) throws Exception {
    String topic = ex.getRequestURI().getPath().substring("/topics/".length());
    JsonNode body = JSON.readTree(ex.getRequestBody());
    List<Future<RecordMetadata>> sent = new ArrayList<>();
    for (JsonNode r : body.get("records")) {
      byte[] key = r.has("key") ? r.get("key").asText().getBytes(StandardCharsets.UTF_8) : null;
      byte[] value = r.get("value").isTextual() ? r.get("value").asText().getBytes(StandardCharsets.UTF_8)
          : JSON.writeValueAsBytes(r.get("value"));
      Integer partition = r.has("partition") ? r.get("partition").asInt() : null;
      sent.add(producer.send(new ProducerRecord<>(topic, partition, key, value)));
    }
    StringBuilder out = new StringBuilder("{\"offsets\":[");
    for (int i = 0; i < sent.size(); i++) {
      RecordMetadata m = sent.get(i).get();
      out.append(i == 0 ? "" : ",").append("{\"partition\":").append(m.partition()).append(",\"offset\":").append(m.offset()).append('}');
    }
    byte[] b = out.append("]}").toString().getBytes(StandardCharsets.UTF_8);
    ex.getResponseHeaders().set("Content-Type", "application/vnd.kafka.v2+json");
    ex.sendResponseHeaders(200, b.length);
    try (OutputStream o = ex.getResponseBody()) { o.write(b); }
  }
}

package io.cdcapply.infra.converter;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.apicurio.registry.utils.converter.avro.AvroData;
import io.apicurio.registry.utils.converter.avro.AvroDataConfig;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.errors.DataException;
import org.apache.kafka.connect.storage.Converter;

/**
 * Converts Connect data to Avro in the Confluent wire format: byte 0, the
 * schema id as a 4-byte big-endian integer, then the Avro binary encoding.
 * Schemas are registered under the subject {@code <topic>-key} or
 * {@code <topic>-value} (Confluent's TopicNameStrategy) with
 * {@code POST /subjects/{subject}/versions}, and read back with
 * {@code GET /schemas/ids/{id}}.
 *
 * <p>Settings: {@code schema.registry.url} (required), plus AvroData's
 * {@code connect.meta.data}, {@code enhanced.avro.schema.support} and
 * {@code schemas.cache.config}.
 */
public final class ConfluentWireAvroConverter implements Converter {
    private static final byte MAGIC = 0;
    private static final String CONTENT_TYPE = "application/vnd.schemaregistry.v1+json";
    private static final ObjectMapper JSON = new ObjectMapper();

    private final Map<org.apache.avro.Schema, Integer> idsBySchema = new ConcurrentHashMap<>();
    private final Map<Integer, org.apache.avro.Schema> schemasById = new ConcurrentHashMap<>();
    private HttpClient http;
    private String registryUrl;
    private boolean isKey;
    private AvroData avroData;

    @Override
    public void configure(Map<String, ?> configs, boolean isKey) {
        Object url = configs.get("schema.registry.url");
        if (url == null || url.toString().isBlank()) {
            throw new DataException("configure converter: schema.registry.url is required");
        }
        this.registryUrl = url.toString().replaceAll("/+$", "");
        this.isKey = isKey;
        this.avroData = new AvroData(new AvroDataConfig(configs));
        this.http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
    }

    @Override
    public byte[] fromConnectData(String topic, Schema schema, Object value) {
        // Kafka tombstones stay null, as with Confluent's converter.
        if (schema == null && value == null) {
            return null;
        }
        org.apache.avro.Schema avroSchema = avroData.fromConnectSchema(schema);
        Object avroValue = avroData.fromConnectData(schema, value);
        if (avroValue == null) {
            return null;
        }
        int id = idsBySchema.computeIfAbsent(avroSchema, s -> register(subject(topic), s));
        try {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            out.write(MAGIC);
            out.write(ByteBuffer.allocate(4).putInt(id).array());
            BinaryEncoder enc = EncoderFactory.get().directBinaryEncoder(out, null);
            new GenericDatumWriter<Object>(avroSchema).write(avroValue, enc);
            enc.flush();
            return out.toByteArray();
        } catch (IOException | RuntimeException e) {
            throw new DataException("encode avro for topic " + topic + ": " + e.getMessage(), e);
        }
    }

    @Override
    public SchemaAndValue toConnectData(String topic, byte[] value) {
        if (value == null) {
            return SchemaAndValue.NULL;
        }
        ByteBuffer buf = ByteBuffer.wrap(value);
        if (value.length < 5 || buf.get() != MAGIC) {
            throw new DataException("decode avro for topic " + topic + ": not in the Confluent wire format");
        }
        int id = buf.getInt();
        org.apache.avro.Schema avroSchema = schemasById.computeIfAbsent(id, this::fetch);
        try {
            Object datum = new GenericDatumReader<Object>(avroSchema)
                    .read(null, DecoderFactory.get().binaryDecoder(value, 5, value.length - 5, null));
            return avroData.toConnectData(avroSchema, datum);
        } catch (IOException | RuntimeException e) {
            throw new DataException("decode avro for topic " + topic + ": " + e.getMessage(), e);
        }
    }

    private String subject(String topic) {
        return topic + (isKey ? "-key" : "-value");
    }

    private int register(String subject, org.apache.avro.Schema schema) {
        ObjectNode body = JSON.createObjectNode();
        body.put("schema", schema.toString());
        String path = "/subjects/" + URLEncoder.encode(subject, StandardCharsets.UTF_8) + "/versions";
        JsonNode resp = call(HttpRequest.newBuilder(URI.create(registryUrl + path))
                .header("Content-Type", CONTENT_TYPE)
                .POST(HttpRequest.BodyPublishers.ofString(body.toString())), "register schema for " + subject);
        if (!resp.hasNonNull("id")) {
            throw new DataException("register schema for " + subject + ": no id in " + resp);
        }
        int id = resp.get("id").asInt();
        schemasById.putIfAbsent(id, schema);
        return id;
    }

    private org.apache.avro.Schema fetch(int id) {
        JsonNode resp = call(HttpRequest.newBuilder(URI.create(registryUrl + "/schemas/ids/" + id)).GET(),
                "get schema " + id);
        if (!resp.hasNonNull("schema")) {
            throw new DataException("get schema " + id + ": no schema in " + resp);
        }
        return new org.apache.avro.Schema.Parser().parse(resp.get("schema").asText());
    }

    private JsonNode call(HttpRequest.Builder req, String what) {
        try {
            HttpResponse<String> resp = http.send(
                    req.header("Accept", CONTENT_TYPE).timeout(Duration.ofSeconds(30)).build(),
                    HttpResponse.BodyHandlers.ofString());
            if (resp.statusCode() / 100 != 2) {
                throw new DataException(what + ": status " + resp.statusCode() + ": " + resp.body());
            }
            return JSON.readTree(resp.body());
        } catch (IOException e) {
            throw new DataException(what + ": " + e.getMessage(), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new DataException(what + ": interrupted", e);
        }
    }
}

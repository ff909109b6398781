import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.Arrays;
import org.bouncycastle.cert.X509CertificateHolder;
import org.bouncycastle.cms.jcajce.JcaSimpleSignerInfoVerifierBuilder;
import org.bouncycastle.openssl.PEMParser;
import org.bouncycastle.tsp.TimeStampResponse;
import org.bouncycastle.tsp.TimeStampToken;

/**
 * Bouncy Castle's own check of an attestd time-stamp reply (run as a Java 17
 * single-file program): TimeStampToken.validate checks the CMS signature, the
 * ESSCertIDv2 against the TSA certificate, its critical timeStamping EKU and
 * its validity at genTime; then the imprint is compared with the data's SHA-256.
 * Arguments: reply.tsr tsa.pem data-file.
 */
public class Validate {
  public static void main(String[] args) throws Exception {
    TimeStampResponse response = new TimeStampResponse(Files.readAllBytes(Path.of(args[0])));
    if (response.getStatus() != 0) throw new IllegalStateException("status " + response.getStatus());
    X509CertificateHolder tsa;
    try (PEMParser pem = new PEMParser(Files.newBufferedReader(Path.of(args[1])))) { tsa = (X509CertificateHolder) pem.readObject(); }
    TimeStampToken token = response.getTimeStampToken();
    token.validate(new JcaSimpleSignerInfoVerifierBuilder().build(tsa));
    byte[] digest = MessageDigest.getInstance("SHA-256").digest(Files.readAllBytes(Path.of(args[2])));
    if (!Arrays.equals(digest, token.getTimeStampInfo().getMessageImprintDigest())) throw new IllegalStateException("imprint differs");
    System.out.println("VALID serial=" + token.getTimeStampInfo().getSerialNumber().toString(16) + " genTime=" + token.getTimeStampInfo().getGenTime().toInstant() + " policy=" + token.getTimeStampInfo().getPolicy());
  }
}

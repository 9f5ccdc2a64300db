package peers;

import java.lang.instrument.ClassFileTransformer;
import java.lang.instrument.Instrumentation;
import java.security.ProtectionDomain;
import jdk.internal.org.objectweb.asm.ClassReader;
import jdk.internal.org.objectweb.asm.ClassVisitor;
import jdk.internal.org.objectweb.asm.ClassWriter;
import jdk.internal.org.objectweb.asm.MethodVisitor;
import jdk.internal.org.objectweb.asm.Opcodes;

/**
 * A Java agent that keeps a peer's listeners on loopback: RocketMQ 4.x's name server, broker and
 * HA service listen on {@code new InetSocketAddress(port)}, every interface, and have no setting
 * for the address (5.x has bindAddress). In RocketMQ's classes, each such call becomes
 * {@code new InetSocketAddress("127.0.0.1", port)} as the class is loaded; nothing else changes.
 * Built into the peers cache by {@code python -m peers.fetch} (javac and the JDK's own ASM).
 */
public final class LoopbackAgent {
    private static final String ADDRESS = "java/net/InetSocketAddress";

    private LoopbackAgent() {
    }

    public static void premain(String args, Instrumentation instrumentation) {
        instrumentation.addTransformer(new ClassFileTransformer() {
            @Override
            public byte[] transform(ClassLoader loader, String name, Class<?> redefined, ProtectionDomain domain,
                                    byte[] bytes) {
                return name != null && name.startsWith("org/apache/rocketmq/") ? loopback(bytes) : null;
            }
        });
    }

    static byte[] loopback(byte[] bytes) {
        ClassReader reader = new ClassReader(bytes);
        ClassWriter writer = new ClassWriter(reader, ClassWriter.COMPUTE_MAXS);
        boolean[] changed = {false};
        reader.accept(new ClassVisitor(Opcodes.ASM8, writer) {
            @Override
            public MethodVisitor visitMethod(int access, String name, String desc, String signature, String[] ex) {
                return new MethodVisitor(Opcodes.ASM8, super.visitMethod(access, name, desc, signature, ex)) {
                    @Override
                    public void visitMethodInsn(int op, String owner, String method, String d, boolean itf) {
                        if (op == Opcodes.INVOKESPECIAL && ADDRESS.equals(owner) && "<init>".equals(method)
                                && "(I)V".equals(d)) {
                            super.visitLdcInsn("127.0.0.1");  // ..., port -> ..., "127.0.0.1", port
                            super.visitInsn(Opcodes.SWAP);
                            super.visitMethodInsn(op, owner, method, "(Ljava/lang/String;I)V", false);
                            changed[0] = true;
                            return;
                        }
                        super.visitMethodInsn(op, owner, method, d, itf);
                    }
                };
            }
        }, 0);
        return changed[0] ? writer.toByteArray() : null;
    }
}

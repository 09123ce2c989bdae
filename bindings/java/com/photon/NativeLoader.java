package com.photon;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * Loads the native libraries packed in the jar (libphoton.so.0 and the JNI wrapper) by copying
 * them to a temporary directory. A jar from a CUDA build also carries the GPU module
 * libphoton-cuda.so, which libphoton loads from beside itself when a model asks for a GPU: it is
 * unpacked into the same directory and stays there until the JVM exits. The system property
 * photon.library.path names a directory to load them from instead.
 */
final class NativeLoader {
  private static final String[] LIBRARIES = {"libphoton.so.0", "libphoton_jni.so"};
  private static final String CUDA_MODULE = "libphoton-cuda.so";

  private NativeLoader() {}

  static synchronized void load() {
    String directory = System.getProperty("photon.library.path");
    if (directory != null) {
      for (String name : LIBRARIES) {
        System.load(Path.of(directory, name).toAbsolutePath().toString());
      }
      return;
    }
    try {
      Path temporary = Files.createTempDirectory("photon-jni");
      boolean keep = false;
      try {
        // libphoton.so.0 first, so that the JNI wrapper's dependency on it is already satisfied.
        for (String name : LIBRARIES) {
          Path file = unpack(name, temporary);
          if (file == null) {
            throw new UnsatisfiedLinkError("photon: " + name + " is missing from the jar");
          }
          System.load(file.toString());
        }
        Path module = unpack(CUDA_MODULE, temporary);
        if (module != null) {
          // Loaded later, by libphoton, by its path: removed at exit (the directory after it).
          keep = true;
          temporary.toFile().deleteOnExit();
          module.toFile().deleteOnExit();
        }
      } finally {
        // A loaded library stays mapped once its file is gone: leave nothing else behind.
        for (String name : LIBRARIES) Files.deleteIfExists(temporary.resolve(name));
        if (!keep) Files.deleteIfExists(temporary);
      }
    } catch (IOException e) {
      throw new UnsatisfiedLinkError("photon: cannot unpack the native library: " + e);
    }
  }

  /** Copies the jar's resource native/NAME into directory; null when the jar has none. */
  private static Path unpack(String name, Path directory) throws IOException {
    try (InputStream in = NativeLoader.class.getResourceAsStream("native/" + name)) {
      if (in == null) return null;
      Path file = directory.resolve(name);
      Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
      return file;
    }
  }
}

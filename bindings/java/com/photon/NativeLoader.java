package com.photon;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * Loads the native libraries packed in the jar (libphoton.so.0 and the JNI wrapper) by copying
 * them to a temporary directory. The system property photon.library.path names a directory to
 * load them from instead.
 */
final class NativeLoader {
  private static final String[] LIBRARIES = {"libphoton.so.0", "libphoton_jni.so"};

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
      try {
        // libphoton.so.0 first, so that the JNI wrapper's dependency on it is already satisfied.
        for (String name : LIBRARIES) {
          Path file = temporary.resolve(name);
          try (InputStream in = NativeLoader.class.getResourceAsStream("native/" + name)) {
            if (in == null) {
              throw new UnsatisfiedLinkError("photon: " + name + " is missing from the jar");
            }
            Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
          }
          System.load(file.toString());
        }
      } finally {
        // A loaded library stays mapped once its file is gone: leave nothing behind.
        for (String name : LIBRARIES) Files.deleteIfExists(temporary.resolve(name));
        Files.deleteIfExists(temporary);
      }
    } catch (IOException e) {
      throw new UnsatisfiedLinkError("photon: cannot unpack the native library: " + e);
    }
  }
}

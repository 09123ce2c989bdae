// CudaCheck -- asks the installed jar for a GPU model: prints "device cuda:N" when one loads, or
// the library's message when none can be had (install_test.py checks which failure it names).
import com.photon.Model;
import com.photon.PhotonException;

public class CudaCheck {
  public static void main(String[] args) {
    try (Model model = new Model(args[0], "cuda")) {
      System.out.println("device " + model.device());
    } catch (PhotonException e) {
      System.out.println(e.getMessage());
    }
  }
}
